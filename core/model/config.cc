#include "core/model/config.h"
