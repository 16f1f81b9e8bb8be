#include "server/service/codec.h"

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;

grpc::ByteBuffer to_buffer(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

TEST(Codec, CChunkDecodesAsAMultiplyResponse) {
  std::vector<float> c(1000);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = float(i) * 0.5f;
  for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{300}}) {
    grpc::ByteBuffer bb = encode_c_chunk(c.data(), offset, 700);
    v1::MultiplyResponse resp;
    grpc::ProtoBufferReader reader(&bb);
    ASSERT_TRUE(resp.ParseFromZeroCopyStream(&reader));
    ASSERT_TRUE(resp.has_chunk());
    EXPECT_EQ(resp.chunk().matrix(), v1::MATRIX_C);
    EXPECT_EQ(resp.chunk().offset(), offset);
    ASSERT_EQ(resp.chunk().data().size(), 700u * 4);
    EXPECT_EQ(std::memcmp(resp.chunk().data().data(), c.data() + offset, 700 * 4), 0);
  }
}

// The summary lists every concrete kernel that ran with its launches, in the
// engine's order; `kernel` is the one with the most.
TEST(Codec, SummaryListsEveryKernelRowWithItsLaunches) {
  GemmReport report;
  report.backend = "cuda";
  report.kernel_rows = {
      {"simt_tma_128x256x32_w64x64_t8x16_s4", 7}, {"simt_cpasync_64x128x16_w32x64_t8x8_s4", 1}, {"cublas_sgemm", 1}};
  report.kernel_row = most_launched_row(report.kernel_rows);
  SummaryFigures f;
  f.request_id = "r1";
  grpc::ByteBuffer bb = encode_summary(report, f);
  v1::MultiplyResponse resp;
  grpc::ProtoBufferReader reader(&bb);
  ASSERT_TRUE(resp.ParseFromZeroCopyStream(&reader));
  ASSERT_TRUE(resp.has_summary());
  const v1::MultiplySummary& sum = resp.summary();
  EXPECT_EQ(sum.kernel(), "simt_tma_128x256x32_w64x64_t8x16_s4");
  ASSERT_EQ(sum.kernel_rows_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sum.kernel_rows(i).name(), report.kernel_rows[std::size_t(i)].name);
    EXPECT_EQ(sum.kernel_rows(i).launches(), report.kernel_rows[std::size_t(i)].launches);
  }
  // An engine that counted nothing: no list, and the family names the kernel.
  GemmReport bare;
  bare.kernel = KernelKind::kCublas;
  grpc::ByteBuffer bb2 = encode_summary(bare, f);
  grpc::ProtoBufferReader reader2(&bb2);
  ASSERT_TRUE(resp.ParseFromZeroCopyStream(&reader2));
  EXPECT_EQ(resp.summary().kernel_rows_size(), 0);
  EXPECT_EQ(resp.summary().kernel(), "cublas");
}

std::string flatten(grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST(Codec, ZeroCopyCChunkIsByteExactWithProtobufAndHoldsItsBufferUntilReleased) {
  auto owner = std::make_shared<std::vector<float>>(5000);
  for (std::size_t i = 0; i < owner->size(); ++i) (*owner)[i] = float(i) * 0.25f - 7.0f;
  std::weak_ptr<std::vector<float>> watch = owner;
  for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{127}, int64_t{128}, int64_t{4000}}) {
    for (int64_t count : {int64_t{1}, int64_t{31}, int64_t{1000}}) {
      v1::MultiplyResponse want;
      want.mutable_chunk()->set_matrix(v1::MATRIX_C);
      want.mutable_chunk()->set_offset(offset);
      want.mutable_chunk()->set_data(owner->data() + offset, std::size_t(count) * sizeof(float));
      grpc::ByteBuffer bb = encode_c_chunk(owner->data(), offset, count, owner);
      EXPECT_EQ(flatten(bb), want.SerializeAsString()) << "offset " << offset << " count " << count;
      grpc::ByteBuffer copied = encode_c_chunk(owner->data(), offset, count);
      EXPECT_EQ(flatten(copied), want.SerializeAsString());
    }
  }
  {
    grpc::ByteBuffer held = encode_c_chunk(owner->data(), 0, 10, owner);
    owner.reset();
    EXPECT_FALSE(watch.expired()) << "the slice must keep C's buffer alive";
  }
  EXPECT_TRUE(watch.expired()) << "the last slice released C's buffer";
}

TEST(Codec, ParseErrorsEmptyMessagesAndOversizedChunksAreNamed) {
  grpc::ByteBuffer junk = to_buffer("\xff\xff\xff\xff not protobuf");
  auto r = decode_request(junk, 1, 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not parse"), std::string::npos) << r.status().message();

  grpc::ByteBuffer empty = to_buffer("");
  auto e = decode_request(empty, 2, 1 << 20);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, RequestMessage::Kind::kEmpty);

  v1::MultiplyRequest big;
  big.mutable_chunk()->set_matrix(v1::MATRIX_A);
  big.mutable_chunk()->set_data(std::string(2 << 20, '\0'));
  grpc::ByteBuffer bb = to_buffer(big.SerializeAsString());
  auto o = decode_request(bb, 3, 1 << 20);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("1048576 bytes of matrix data per message"), std::string::npos)
      << o.status().message();
  EXPECT_NE(o.status().message().find("several MatrixChunk messages"), std::string::npos);
}

TEST(Codec, HeaderAndChunkConvert) {
  v1::MultiplyRequest h;
  h.mutable_header()->set_m(3);
  h.mutable_header()->set_n(4);
  h.mutable_header()->set_k(5);
  h.mutable_header()->set_beta(0.5f);
  h.mutable_header()->set_split(v1::SPLIT_SINGLE);
  grpc::ByteBuffer hb = to_buffer(h.SerializeAsString());
  auto r = decode_request(hb, 1, 1 << 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, RequestMessage::Kind::kHeader);
  EXPECT_EQ(r->header.shape.k, 5);
  EXPECT_EQ(r->header.alpha, 1.0f);
  EXPECT_EQ(r->header.beta, 0.5f);
  EXPECT_EQ(r->header.options.split, SplitMode::kSingle);

  v1::MultiplyRequest c;
  c.mutable_chunk()->set_matrix(v1::MATRIX_B);
  c.mutable_chunk()->set_offset(8);
  c.mutable_chunk()->set_data(std::string(16, '\1'));
  grpc::ByteBuffer cb = to_buffer(c.SerializeAsString());
  auto d = decode_request(cb, 2, 1 << 20);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->matrix, MatrixId::kB);
  EXPECT_EQ(d->offset, 8);
  EXPECT_EQ(d->data_bytes, 16u);
}

// Ops and submatrix offsets: unset is n and no offset (old clients unchanged);
// an op outside the enum is INVALID_ARGUMENT naming the field.
TEST(Codec, OpsAndResidentOffsetsConvert) {
  v1::MultiplyRequest h;
  h.mutable_header()->set_m(3);
  h.mutable_header()->set_n(4);
  h.mutable_header()->set_k(5);
  grpc::ByteBuffer plain = to_buffer(h.SerializeAsString());
  auto r = decode_request(plain, 1, 1 << 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->header.op_a, Op::kN);
  EXPECT_EQ(r->header.op_b, Op::kN);
  EXPECT_FALSE(r->resident.a_at || r->resident.b_at || r->resident.c_at);
  EXPECT_EQ(r->header.a_dims(), (MatrixDims{3, 5}));

  h.mutable_header()->set_op_a(v1::OP_T);
  h.mutable_header()->set_op_b(v1::OP_T);
  h.mutable_header()->set_a_handle(std::string(32, 'a'));
  h.mutable_header()->mutable_a_at()->set_row(2);
  h.mutable_header()->mutable_a_at()->set_col(7);
  grpc::ByteBuffer t = to_buffer(h.SerializeAsString());
  r = decode_request(t, 1, 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->header.op_a, Op::kT);
  EXPECT_EQ(r->header.op_b, Op::kT);
  EXPECT_EQ(r->header.a_dims(), (MatrixDims{5, 3}));  // A stored k x m
  EXPECT_EQ(r->header.b_dims(), (MatrixDims{4, 5}));  // B stored n x k
  ASSERT_TRUE(r->resident.a_at.has_value());
  EXPECT_EQ(*r->resident.a_at, (MatrixOffset{2, 7}));

  for (const char* field : {"op_a", "op_b"}) {
    v1::MultiplyRequest bad = h;
    if (field[3] == 'a') {
      bad.mutable_header()->set_op_a(static_cast<v1::Op>(5));
    } else {
      bad.mutable_header()->set_op_b(static_cast<v1::Op>(-1));
    }
    grpc::ByteBuffer bb = to_buffer(bad.SerializeAsString());
    auto d = decode_request(bb, 1, 1 << 20);
    ASSERT_FALSE(d.ok()) << field;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find(std::string("header.") + field), std::string::npos) << d.status().message();
  }
}

TEST(Codec, StripedHeaderAttachAndGrantConvert) {
  v1::MultiplyRequest h;
  h.mutable_header()->set_m(64);
  h.mutable_header()->set_n(4);
  h.mutable_header()->set_k(5);
  h.mutable_header()->set_stripes(4);
  h.mutable_header()->set_stripe_rows(8);
  grpc::ByteBuffer hb = to_buffer(h.SerializeAsString());
  auto r = decode_request(hb, 1, 1 << 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, RequestMessage::Kind::kHeader);
  EXPECT_EQ(r->stripes, 4);
  EXPECT_EQ(r->stripe_rows, 8);

  v1::MultiplyRequest a;
  a.mutable_attach()->set_token(std::string("\0\1\2\3", 4) + std::string(12, 'x'));
  a.mutable_attach()->set_stripe(3);
  grpc::ByteBuffer ab = to_buffer(a.SerializeAsString());
  auto d = decode_request(ab, 1, 1 << 20);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, RequestMessage::Kind::kAttach);
  EXPECT_EQ(d->token, a.attach().token());
  EXPECT_EQ(d->stripe, 3);

  grpc::ByteBuffer g = encode_stripe_grant(a.attach().token(), 4);
  v1::MultiplyResponse resp;
  grpc::ProtoBufferReader reader(&g);
  ASSERT_TRUE(resp.ParseFromZeroCopyStream(&reader));
  ASSERT_TRUE(resp.has_stripe_grant());
  EXPECT_EQ(resp.stripe_grant().token(), a.attach().token());
  EXPECT_EQ(resp.stripe_grant().stripes(), 4);
}

// The message as gRPC may hand it over: split into slices anywhere (empty
// ones too); the in-place reader must agree with protobuf on every split.
TEST(Codec, ChunksSplitAcrossSlicesDecodeInPlaceLikeProtobuf) {
  std::mt19937 rng(7);
  std::vector<float> payload(1000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = float(i) - 0.25f;
  v1::MultiplyRequest c;
  c.mutable_chunk()->set_matrix(v1::MATRIX_C);
  c.mutable_chunk()->set_offset(123456789012);
  c.mutable_chunk()->set_data(reinterpret_cast<const char*>(payload.data()), payload.size() * 4);
  const std::string wire = c.SerializeAsString();
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<grpc::Slice> slices;
    std::size_t at = 0;
    while (at < wire.size()) {
      const std::size_t n = std::min<std::size_t>(wire.size() - at, rng() % 3 == 0 ? rng() % 4 : rng() % 900);
      slices.emplace_back(wire.data() + at, n);
      at += n;
    }
    grpc::ByteBuffer bb(slices.data(), slices.size());
    auto d = decode_request(bb, 1, 1 << 20);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    ASSERT_EQ(d->kind, RequestMessage::Kind::kChunk);
    EXPECT_EQ(d->matrix, MatrixId::kC);
    EXPECT_EQ(d->offset, 123456789012);
    ASSERT_EQ(d->data_bytes, payload.size() * 4);
    std::vector<float> got(payload.size());
    d->copy_data(got.data());
    ASSERT_EQ(got, payload) << "trial " << trial;
  }
}

TEST(Codec, UnusualEncodingsFallBackToProtobuf) {
  // The chunk field twice (protobuf merges them); then the fields in reverse order (read in place).
  v1::MultiplyRequest first, second;
  first.mutable_chunk()->set_matrix(v1::MATRIX_A);
  first.mutable_chunk()->set_data(std::string(8, '\2'));
  second.mutable_chunk()->set_offset(2);
  std::string wire = first.SerializeAsString() + second.SerializeAsString();
  grpc::ByteBuffer twice = to_buffer(wire);
  auto d = decode_request(twice, 1, 1 << 20);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->matrix, MatrixId::kA);
  EXPECT_EQ(d->offset, 2);
  EXPECT_EQ(d->data_bytes, 8u);
  // MatrixChunk { data = 4 bytes, offset = 1, matrix = B }, hand-encoded in reverse field order.
  const std::string chunk = std::string("\x1a\x04\x01\x02\x03\x04", 6) + "\x10\x01" + "\x08\x02";
  const std::string reversed = std::string("\x12") + char(chunk.size()) + chunk;
  grpc::ByteBuffer rb = to_buffer(reversed);
  auto r = decode_request(rb, 1, 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->matrix, MatrixId::kB);
  EXPECT_EQ(r->offset, 1);
  ASSERT_EQ(r->data_bytes, 4u);
  char got[4];
  r->copy_data(got);
  EXPECT_EQ(std::string(got, 4), std::string("\x01\x02\x03\x04", 4));
  // Truncated: a parse error, as protobuf would say.
  grpc::ByteBuffer cut = to_buffer(reversed.substr(0, reversed.size() - 3));
  EXPECT_FALSE(decode_request(cut, 1, 1 << 20).ok());
}

// Found by the codec fuzzer (tests/fuzz/codec_fuzzer.cc): the in-place path
// took a field numbered 0 inside a chunk, a tag over 32 bits (whose field
// number it truncated) and a tag spelt in 6 bytes, all of which protobuf refuses.
TEST(Codec, TagsProtobufRefusesAreRefusedInPlaceToo) {
  const std::string field_zero_in_chunk = std::string("\x12\x06\x08\x01\x10\x00\x00\x00", 8);
  const std::string tag_over_32_bits = std::string("\x92\x80\x80\x80\x80\x01\x02\x08\x01", 9);
  const std::string tag_in_six_bytes = std::string("\x92\x80\x80\x80\x80\x00\x02\x08\x01", 9);
  for (const std::string& bytes : {field_zero_in_chunk, tag_over_32_bits, tag_in_six_bytes}) {
    v1::MultiplyRequest req;
    EXPECT_FALSE(req.ParseFromString(bytes));
    grpc::ByteBuffer bb = to_buffer(bytes);
    auto r = decode_request(bb, 1, 1 << 20);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("does not parse"), std::string::npos) << r.status().message();
  }
}

// MultiplyUnaryRequest: each top-level field is read as the MultiplyRequest of
// that field, in place, across slice boundaries anywhere in the message; unknown
// fields are skipped; a chunk's errors name it.
TEST(Codec, UnaryRequestDecodesFieldByFieldAcrossSlices) {
  v1::MultiplyUnaryRequest u;
  u.mutable_header()->set_m(2);
  u.mutable_header()->set_n(3);
  u.mutable_header()->set_k(4);
  std::vector<float> a(8), b(12);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(i);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = -float(i);
  auto* ca = u.add_chunks();
  ca->set_matrix(v1::MATRIX_A);
  ca->set_data(std::string(reinterpret_cast<const char*>(a.data()), a.size() * 4));
  auto* cb = u.add_chunks();
  cb->set_matrix(v1::MATRIX_B);
  cb->set_data(std::string(reinterpret_cast<const char*>(b.data()), b.size() * 4));
  const std::string bytes = u.SerializeAsString() + std::string("\xa0\x06\x07", 3);  // field 100 (varint 7): skipped
  for (std::size_t cut = 1; cut < bytes.size(); cut += 7) {
    grpc::Slice parts[2] = {grpc::Slice(bytes.substr(0, cut)), grpc::Slice(bytes.substr(cut))};
    const grpc::ByteBuffer buffer(parts, 2);
    auto m = decode_unary_request(buffer, 1 << 20);
    ASSERT_TRUE(m.ok()) << "cut at " << cut << ": " << m.status().to_string();
    ASSERT_EQ(m->size(), 3u);
    EXPECT_EQ((*m)[0].kind, RequestMessage::Kind::kHeader);
    EXPECT_EQ((*m)[0].header.shape.k, 4);
    EXPECT_EQ((*m)[1].matrix, MatrixId::kA);
    EXPECT_EQ((*m)[2].matrix, MatrixId::kB);
    std::vector<float> got(12);
    ASSERT_EQ((*m)[2].data_bytes, 48u);
    (*m)[2].copy_data(got.data());
    EXPECT_EQ(got, b);
  }
  v1::MultiplyUnaryRequest bad = u;
  bad.mutable_chunks(1)->set_matrix(static_cast<v1::Matrix>(9));
  const grpc::ByteBuffer bad_buffer = to_buffer(bad.SerializeAsString());
  auto e = decode_unary_request(bad_buffer, 1 << 20);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("MultiplyUnaryRequest.chunks[1]: chunk.matrix has unknown value 9"),
            std::string::npos)
      << e.status().to_string();
  const grpc::ByteBuffer junk = to_buffer(std::string("\x0a\x7f\x01", 3));  // a header longer than the message
  EXPECT_EQ(decode_unary_request(junk, 1 << 20).status().code(), StatusCode::kInvalidArgument);
}

// MultiplyResponse{chunk} then MultiplyResponse{summary}, concatenated, is MultiplyUnaryResponse{c, summary}.
TEST(Codec, ChunkThenSummaryIsAUnaryResponse) {
  std::vector<float> c(6);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = float(i) + 0.25f;
  grpc::ByteBuffer chunk = encode_c_chunk(c.data(), 0, 6);
  GemmReport report;
  report.backend = "cpu";
  SummaryFigures f;
  f.request_id = "42";
  grpc::ByteBuffer summary = encode_summary(report, f);
  grpc::ByteBuffer both = concat_messages(chunk, summary);
  v1::MultiplyUnaryResponse resp;
  grpc::ProtoBufferReader reader(&both);
  ASSERT_TRUE(resp.ParseFromZeroCopyStream(&reader));
  EXPECT_EQ(resp.c().matrix(), v1::MATRIX_C);
  ASSERT_EQ(resp.c().data().size(), 24u);
  std::vector<float> got(6);
  std::memcpy(got.data(), resp.c().data().data(), 24);
  EXPECT_EQ(got, c);
  EXPECT_EQ(resp.summary().request_id(), "42");
  EXPECT_EQ(resp.summary().backend(), "cpu");
}

}  // namespace
}  // namespace sgemm
