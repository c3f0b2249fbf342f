// TensorBoard events by hand: a few protobuf fields (varints, fixed 64/32-bit, length-
// delimited) and the TFRecord framing with CRC-32C.
#include "nanochat/telemetry/tensorboard_writer.h"

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "nanochat/common/error.h"
#include "nanochat/common/files.h"

namespace nanochat {

namespace {

// CRC-32C, reflected polynomial 0x82F63B78, one table lookup per byte
struct Crc32cTable {
  uint32_t t[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};

// protobuf wire format: key = field << 3 | wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32)
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += (char)(uint8_t)(v | 0x80);
    v >>= 7;
  }
  out += (char)(uint8_t)v;
}
void put_key(std::string& out, int field, int wire) { put_varint(out, (uint64_t)(field << 3 | wire)); }
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) out += (char)(uint8_t)(v >> (8 * i));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}
void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_key(out, field, 5);
  put_le(out, bits, 4);
}

// an Event's header fields: wall_time = 1, step = 2
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  put_key(e, 2, 0);
  put_varint(e, (uint64_t)step);  // int64 as a varint: negative steps take ten bytes, as protobuf's
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const Crc32cTable table;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = table.t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t tfrecord_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(const std::string& data) {
  std::string len;
  put_le(len, data.size(), 8);
  std::string out = len;
  put_le(out, tfrecord_masked_crc(crc32c(len.data(), len.size())), 4);
  out += data;
  put_le(out, tfrecord_masked_crc(crc32c(data.data(), data.size())), 4);
  return out;
}

std::string tensorboard_scalars_event(double wall_time, int64_t step,
                                      const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);           // Value.tag
    put_float(v, 2, (float)value);  // Value.simple_value
    put_bytes(summary, 1, v);       // Summary.value
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resume_step) {
  make_dirs(dir);
  if (resume_step < 0) {  // a fresh run: the event files of an earlier run in dir go
    if (DIR* d = opendir(dir.c_str())) {
      std::vector<std::string> old;
      while (dirent* e = readdir(d))
        if (std::strncmp(e->d_name, "events.out.tfevents.", 20) == 0) old.push_back(dir + "/" + e->d_name);
      closedir(d);
      for (const std::string& path : old) std::remove(path.c_str());
    }
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double now = now_seconds();
  // the last number tells apart two writers of one process within the same second
  static std::atomic<int> counter{0};
  path_ = strprintf("%s/events.out.tfevents.%010lld.%s.%d.%d", dir.c_str(), (long long)now, host, (int)getpid(),
                    counter++);
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) fail("cannot create the TensorBoard event file %s: %s", path_.c_str(), std::strerror(errno));
  std::string version = event_head(now, 0);
  put_bytes(version, 3, "brain.Event:2");  // Event.file_version
  write_event(version);
  if (resume_step >= 0) {
    std::string session_log;
    put_key(session_log, 1, 0);  // SessionLog.status = START (1)
    put_varint(session_log, 1);
    std::string e = event_head(now, resume_step);
    put_bytes(e, 7, session_log);  // Event.session_log
    write_event(e);
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& other) noexcept
    : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}

TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
  }
  return *this;
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  if (!file_ || scalars.empty()) return;
  write_event(tensorboard_scalars_event(now_seconds(), step, scalars));
}

void TensorBoardWriter::write_event(const std::string& event) {
  const std::string record = tfrecord_frame(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    fail("cannot write %s: %s", path_.c_str(), std::strerror(errno));
}

}  // namespace nanochat
