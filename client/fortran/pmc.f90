! pmc: hardware performance counters over named regions of Fortran code
! (libpmcclient through ISO_C_BINDING; libpmcclient(3) says what each call does).
!
!   use pmc
!   integer(pmc_region_kind) :: r
!   r = pmc_region("solve")       ! once: the name is interned (trailing blanks trimmed)
!   do it = 1, n
!      call pmc_begin(r)
!      call solve(it)
!      call pmc_end(r)
!   end do
!   call pmc_flush()              ! optional: send this thread's samples now
!
! Each thread (OpenMP's too) registers with pmcdaemon on its first region and reads its
! own counters; every call is safe from any thread. With no daemon the calls are no-ops
! after one warning line on stderr. Build: gfortran app.f90 $(pkg-config --cflags --libs
! pmcfortran).
module pmc
   use, intrinsic :: iso_c_binding, only: c_char, c_int, c_int32_t, c_null_char
   implicit none
   private

   !> The kind of a region id (C's pmc_region_t; ids are below 65,536). 0 is no region.
   integer, parameter, public :: pmc_region_kind = c_int32_t
   !> The longest region name in bytes (C's PMC_REGION_NAME_MAX), after trimming.
   integer, parameter, public :: pmc_region_name_max = 127

   public :: pmc_region, pmc_begin, pmc_end, pmc_flush, pmc_enabled

   interface
      function pmc_c_region(name) bind(C, name="pmc_region") result(id)
         import :: c_char, c_int32_t
         character(kind=c_char), dimension(*), intent(in) :: name
         integer(c_int32_t) :: id
      end function pmc_c_region

      !> Begin region r on the calling thread (pmc_begin(3)).
      subroutine pmc_begin(r) bind(C, name="pmc_begin")
         import :: c_int32_t
         integer(c_int32_t), value, intent(in) :: r
      end subroutine pmc_begin

      !> End the innermost open region r on the calling thread (pmc_end(3)).
      subroutine pmc_end(r) bind(C, name="pmc_end")
         import :: c_int32_t
         integer(c_int32_t), value, intent(in) :: r
      end subroutine pmc_end

      function pmc_c_flush() bind(C, name="pmc_flush") result(rc)
         import :: c_int
         integer(c_int) :: rc
      end function pmc_c_flush

      function pmc_c_enabled() bind(C, name="pmc_enabled") result(on)
         import :: c_int
         integer(c_int) :: on
      end function pmc_c_enabled
   end interface

contains

   !> Intern a region name (any length; trailing blanks trimmed) and return its id:
   !> 0 when the name is empty, longer than pmc_region_name_max bytes, or profiling is off
   !> (pmc_begin and pmc_end then do nothing). Thread-safe; the same name gives the same id.
   function pmc_region(name) result(id)
      character(len=*), intent(in) :: name
      integer(pmc_region_kind) :: id
      character(kind=c_char, len=len_trim(name) + 1) :: cname

      cname = name(1:len_trim(name))//c_null_char
      id = pmc_c_region(cname)
   end function pmc_region

   !> Send the calling thread's buffered samples now (pmc_flush(3)). stat, when present,
   !> gets 0 or a negative errno (-ENOTCONN: no daemon; the samples are kept).
   subroutine pmc_flush(stat)
      integer, intent(out), optional :: stat
      integer(c_int) :: rc

      rc = pmc_c_flush()
      if (present(stat)) stat = int(rc)
   end subroutine pmc_flush

   !> Whether the calling thread's regions are counted (pmc_enabled(3)).
   logical function pmc_enabled()
      pmc_enabled = pmc_c_enabled() /= 0
   end function pmc_enabled

end module pmc
