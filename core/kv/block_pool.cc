#include "core/kv/block_pool.h"
