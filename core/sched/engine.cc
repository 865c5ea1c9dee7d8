#include "core/sched/engine.h"
