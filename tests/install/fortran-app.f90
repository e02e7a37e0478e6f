! The Fortran test program of install-lang: region "pages" writes N fresh pages of an
! mmap, K times, from the main thread or from each of T OpenMP threads at once.
!   fortran-app pages N K      prints enabled=, count=, flush=
!   fortran-app omp T N K      the same per thread; count is the sum over the threads
program fortran_app
   use, intrinsic :: iso_c_binding
   use pmc
   implicit none

   interface
      function mmap(addr, length, prot, flags, fd, offset) bind(C, name="mmap") result(p)
         import :: c_ptr, c_size_t, c_int, c_long
         type(c_ptr), value :: addr
         integer(c_size_t), value :: length
         integer(c_int), value :: prot, flags, fd
         integer(c_long), value :: offset
         type(c_ptr) :: p
      end function mmap
      function munmap(addr, length) bind(C, name="munmap") result(rc)
         import :: c_ptr, c_size_t, c_int
         type(c_ptr), value :: addr
         integer(c_size_t), value :: length
         integer(c_int) :: rc
      end function munmap
      function sysconf(name) bind(C, name="sysconf") result(v)
         import :: c_int, c_long
         integer(c_int), value :: name
         integer(c_long) :: v
      end function sysconf
   end interface

   ! PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, _SC_PAGESIZE (Linux)
   integer(c_int), parameter :: prot_rw = 3, map_anon_private = 34, sc_pagesize = 30
   character(len=32) :: mode, arg
   integer :: n, k, t, count, stat
   integer(pmc_region_kind) :: r
   integer(c_long) :: page

   page = sysconf(sc_pagesize)
   call get_command_argument(1, mode)
   ! Trailing blanks are trimmed: "pages   " is region "pages".
   r = pmc_region("pages   ")
   count = 0
   if (trim(mode) == "pages") then
      call get_command_argument(2, arg); read (arg, *) n
      call get_command_argument(3, arg); read (arg, *) k
      write (*, '(a,i0)') "enabled=", merge(1, 0, pmc_enabled())
      call run(n, k, count)
   else if (trim(mode) == "omp") then
      call get_command_argument(2, arg); read (arg, *) t
      call get_command_argument(3, arg); read (arg, *) n
      call get_command_argument(4, arg); read (arg, *) k
      write (*, '(a,i0)') "enabled=", merge(1, 0, pmc_enabled())
      !$omp parallel num_threads(t) reduction(+:count)
      call run(n, k, count)
      !$omp end parallel
   else
      error stop "usage: fortran-app pages N K | omp T N K"
   end if
   call pmc_flush(stat)
   write (*, '(a,i0)') "count=", count
   write (*, '(a,i0)') "flush=", stat

contains

   subroutine run(n, k, done)
      integer, intent(in) :: n, k
      integer, intent(inout) :: done
      integer :: i, j, stat
      integer(c_size_t) :: length
      type(c_ptr) :: p
      integer(c_int8_t), pointer :: mem(:)

      length = int(n, c_size_t)*int(page, c_size_t)
      do i = 1, k
         p = mmap(c_null_ptr, length, prot_rw, map_anon_private, -1_c_int, 0_c_long)
         call c_f_pointer(p, mem, [length])
         call pmc_begin(r)
         do j = 0, n - 1
            mem(j*page + 1) = 1_c_int8_t
         end do
         call pmc_end(r)
         if (munmap(p, length) /= 0) error stop "munmap"
         done = done + 1
      end do
      ! Each OpenMP thread sends its own samples (the pool's threads outlive the region).
      call pmc_flush(stat)
   end subroutine run

end program fortran_app
