! The README's Fortran example: a loop whose iterations are a region, over OpenMP threads.
!   gfortran -fopenmp examples/example.f90 $(pkg-config --cflags --libs pmcfortran) -o example
!   ./example && pmcctl query --region dot
program example
   use pmc
   implicit none
   integer(pmc_region_kind) :: dot
   integer, parameter :: n = 100000
   real(8), allocatable :: x(:)
   real(8) :: s, total
   integer :: i, it

   dot = pmc_region("dot")        ! once: the name is interned (trailing blanks trimmed)
   allocate (x(n))
   x = 1
   total = 0
   !$omp parallel do private(i, s) reduction(+:total)
   do it = 1, 400
      call pmc_begin(dot)         ! each thread is counted on its own
      s = 0
      do i = 1, n
         s = s + x(i)*it
      end do
      call pmc_end(dot)
      total = total + s
   end do
   !$omp end parallel do
   call pmc_flush()               ! optional: samples are also sent within 1 s and at exit
   print '(a,es10.3,a,l1)', "total=", total, " counted=", pmc_enabled()
end program example
