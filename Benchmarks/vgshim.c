// vgshim: lets valgrind 3.19 run Swift programs (the benchmark's callgrind
// instruction counts).
//
// libdispatch parks the main thread of an async Swift program in
// sigsuspend() with a sigset_t that lives in read-only memory; valgrind's
// sigsuspend wrapper writes to that mask and dies with SIGSEGV ("the
// 'impossible' happened"). Preloaded with LD_PRELOAD, this hands the kernel
// a writable copy instead. Nothing else changes.
//
// Build: cc -O2 -shared -fPIC -o vgshim.so vgshim.c
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

int sigsuspend(const sigset_t *mask) {
  sigset_t copy = *mask;
  return (int)syscall(SYS_rt_sigsuspend, &copy, _NSIG / 8);
}
