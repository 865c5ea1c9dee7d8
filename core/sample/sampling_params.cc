#include "core/sample/sampling_params.h"
