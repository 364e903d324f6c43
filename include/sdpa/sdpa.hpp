// sdpa/sdpa.hpp — everything a user of the library includes.
#pragma once

#include "sdpa/attention.hpp"
#include "sdpa/blocks.hpp"
#include "sdpa/dispatch.hpp"
#include "sdpa/error.hpp"
#include "sdpa/half.hpp"
#include "sdpa/kvcache.hpp"
#include "sdpa/reference.hpp"
#include "sdpa/tensor.hpp"
#include "sdpa/version.hpp"
