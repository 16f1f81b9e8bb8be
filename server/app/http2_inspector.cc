#include "server/app/http2_inspector.h"

namespace sgemm {

void Http2Inspector::start(int max_resets) {
  matched_ = 0;
  not_http2_ = false;
  in_ = {};
  out_ = {};
  last_client_stream_ = 0;
  forget();
  window_start_ms_ = 0;
  resets_ = 0;
  max_resets_ = max_resets;
}

Http2Verdict Http2Inspector::client_sent(const uint8_t* p, std::size_t len, int64_t now_ms, int max_streams) {
  if (not_http2_) return Http2Verdict::kKeep;
  while (len > 0 && matched_ < kHttp2PrefaceBytes) {
    if (*p != uint8_t(kHttp2Preface[matched_])) {
      not_http2_ = true;
      return Http2Verdict::kKeep;
    }
    ++p;
    --len;
    ++matched_;
  }
  if (matched_ < kHttp2PrefaceBytes) return Http2Verdict::kKeep;
  Http2Verdict v = Http2Verdict::kKeep;
  in_.read(p, len, [&](uint8_t type, uint8_t, uint32_t id) {
    if (type == kHttp2Headers && id % 2 == 1 && id > last_client_stream_) {  // a new stream
      last_client_stream_ = id;
      if (max_streams > 0) {
        if (!open_) open_ = new std::unordered_set<uint32_t>();
        open_->insert(id);
        if (int(open_->size()) > max_streams) v = Http2Verdict::kStreams;
      }
    } else if (type == kHttp2RstStream) {
      end_stream(id);
      if (max_resets_ > 0) {
        if (now_ms - window_start_ms_ >= 1000) {
          window_start_ms_ = now_ms;
          resets_ = 0;
        }
        if (++resets_ > max_resets_) v = Http2Verdict::kResets;
      }
    }
    return v == Http2Verdict::kKeep;
  });
  return v;
}

void Http2Inspector::server_sent(const uint8_t* p, std::size_t len) {
  if (!past_preface()) return;
  out_.read(p, len, [&](uint8_t type, uint8_t flags, uint32_t id) {
    if (type == kHttp2RstStream || ((type == kHttp2Headers || type == kHttp2Data) && (flags & kHttp2EndStream)))
      end_stream(id);
    return true;
  });
}

}  // namespace sgemm
