# SPDX-License-Identifier: Apache-2.0
# JSON-schema constrained generation: the schema compiler, the matcher, token masks (host).
servekit_test(test_constrain LABELS host SOURCES test_constrain.cpp)
