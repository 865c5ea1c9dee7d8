#define _POSIX_C_SOURCE 199309L
#include "clock.h"

#include <time.h>

double clock_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}
