# SPDX-License-Identifier: Apache-2.0
# servekit's driver for bench/peers/run.sh (servekit beside CTranslate2, llama.cpp and HF on the
# same checkpoint). Not built by default nor run by CI: the comparison installs its peers from
# PyPI; run.sh configures with -DSERVEKIT_BENCH_PEERS=ON.
option(SERVEKIT_BENCH_PEERS "Build bench_peers_servekit (bench/peers/run.sh)" OFF)
if(SERVEKIT_BENCH_PEERS)
  add_executable(bench_peers_servekit ${CMAKE_CURRENT_LIST_DIR}/peers/servekit_peer.cpp)
  target_link_libraries(bench_peers_servekit PRIVATE servekit::servekit servekit_warnings
    CLI11::CLI11)
endif()
