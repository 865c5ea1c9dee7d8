// PULSE_HOST_DEVICE marks small inline functions that CUDA kernels call too.
#pragma once

#if defined(__CUDACC__)
#define PULSE_HOST_DEVICE __host__ __device__
#else
#define PULSE_HOST_DEVICE
#endif
