// SPDX-License-Identifier: Apache-2.0
#pragma once
// servekit: everything a user of the host backend needs in one include.
#include "servekit/model/config.hpp"
#include "servekit/core/dims.hpp"
#include "servekit/model/dispatch.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/generate.hpp"
#include "servekit/serve/sampling.hpp"
#include "servekit/text/tokenizer.hpp"
