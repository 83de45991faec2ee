// SPDX-License-Identifier: Apache-2.0
#pragma once
// A request's answer as server-sent events (`data:{json}\n\n`), written as the engine streams
// its tokens. The routes say how a token and the end are spelled (TGI's events, OpenAI's
// chunks); this runs the stream: waiting on the Flow, noticing a client that went away, and
// the bookkeeping once the request is done.
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "servekit/serve/http/server_core.hpp"

namespace servekit::serve::http {

// Writes `data:{json}\n\n`; false if the client is gone.
inline bool write_event(Sink& sink, const std::string& data) {
  const std::string s = "data:" + data + "\n\n";
  return sink.write(s.data(), s.size());
}

// Runs the stream of one or more requests (an OpenAI request's n choices, whose Flows share one
// Bell) on the connection's thread: the transport calls the provider once and it writes every
// event. Events are written as the engine streams tokens, each request's in order, the
// requests' interleaved as they come; a token marked `ends` waits for its result, which the
// engine sets right after.
//
//   on_token(sink, i, token, piece, last) -> bool: request i's token; last is its result with
//   its final token, else null. on_end(sink, results) -> bool: what follows every request's
//   tokens. false: the client is gone, and the requests still running are cancelled.
template <class WriteToken, class WriteEnd>
void stream_flows(ServerCore& core, HttpResponse& res,
                  std::vector<std::shared_ptr<ServerCore::Job>> jobs, WriteToken on_token,
                  WriteEnd on_end) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&core, jobs, on_token, on_end, done](std::size_t, Sink& sink) {
        const std::size_t n = jobs.size();
        Bell& bell = *jobs[0]->flow->bell;
        std::vector<std::size_t> sent(n, 0);
        std::vector<const Result*> last(n, nullptr);  // set with the token that ended it
        std::vector<bool> over(n, false);
        std::size_t open = n;
        bool ok = true;
        while (ok && open > 0) {
          std::unique_lock lk(bell.mu);
          std::size_t i = 0;
          bell.cv.wait(lk, [&] {
            for (i = 0; i < n; i++) {
              const Flow& f = *jobs[i]->flow;
              if (!over[i] && (f.ended || f.tokens.size() > sent[i])) return true;
            }
            return false;
          });
          Flow& f = *jobs[i]->flow;
          if (f.tokens.size() > sent[i]) {
            const GeneratedToken t = f.tokens[sent[i]];
            const std::string piece = f.pieces[sent[i]];
            if (t.ends && !f.ended) {  // the result comes right after this token
              bell.cv.wait(lk, [&] { return f.ended; });
            }
            lk.unlock();
            if (t.ends) last[i] = &jobs[i]->handle.done->wait();
            ok = on_token(sink, i, t, piece, t.ends ? last[i] : nullptr);
            sent[i]++;
            if (last[i]) over[i] = true, open--;
            continue;
          }
          lk.unlock();
          over[i] = true, open--;  // ended without a final token: cancelled or failed
        }
        if (!ok) {
          done->store(true);
          // Gone after a request's last token: it had ended on its own, only the delivery
          // failed. Gone before: cancel it, which frees its cache now.
          for (std::size_t k = 0; k < n; k++)
            if (last[k])
              core.finished(*jobs[k], *last[k], jobs[k]->adapter, false);
            else
              core.abandon(*jobs[k]);
          return false;
        }
        std::vector<const Result*> results;
        for (const auto& job : jobs) results.push_back(&job->handle.done->wait());
        ok = on_end(sink, results);
        done->store(true);
        for (std::size_t k = 0; k < n; k++)
          core.finished(*jobs[k], *results[k], jobs[k]->adapter, !ok);
        // The requests stop counting as admitted before the last byte is written: a client
        // that has read the whole answer must not see them in num_requests_admitted.
        for (const auto& job : jobs) job->ticket.reset();
        if (ok) sink.done();
        return ok;
      },
      [&core, jobs, done](bool) {
        // The connection closed before the provider ran: cancel so nothing keeps running.
        if (!done->exchange(true))
          for (const auto& job : jobs) core.abandon(*job);
      });
}

// One request's stream: on_token(sink, token, piece, last), on_end(sink, result).
template <class WriteToken, class WriteEnd>
void stream_flow(ServerCore& core, HttpResponse& res, std::shared_ptr<ServerCore::Job> job,
                 WriteToken on_token, WriteEnd on_end) {
  stream_flows(
      core, res, {std::move(job)},
      [on_token](Sink& sink, std::size_t, const GeneratedToken& t, const std::string& piece,
                 const Result* last) { return on_token(sink, t, piece, last); },
      [on_end](Sink& sink, const std::vector<const Result*>& rs) { return on_end(sink, *rs[0]); });
}

}  // namespace servekit::serve::http
