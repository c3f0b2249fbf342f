// TensorBoard event files without TensorFlow: what `tensorboard --logdir` reads, written by
// hand. A file events.out.tfevents.<unix seconds>.<host>.<pid>.<n> is a sequence of TFRecords
//   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
// (little-endian), each holding one serialized tensorboard.Event protobuf:
//   Event   { double wall_time = 1; int64 step = 2; oneof { string file_version = 3;
//             Summary summary = 5; SessionLog session_log = 7; } }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// The first record is file_version "brain.Event:2". Every record is flushed as written, so
// TensorBoard shows the curves while a run trains. MetricsLog writes one beside metrics.jsonl.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace nanochat {

uint32_t crc32c(const void* data, size_t n);          // CRC-32C (Castagnoli), as TFRecord uses
uint32_t tfrecord_masked_crc(uint32_t crc);           // ((crc >> 15) | (crc << 17)) + 0xa282ead8
std::string tfrecord_frame(const std::string& data);  // one TFRecord around `data`
// the Event bytes: one Summary with a simple_value per (tag, value)
std::string tensorboard_scalars_event(double wall_time, int64_t step,
                                      const std::vector<std::pair<std::string, double>>& scalars);

class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;  // disabled: add_scalars does nothing
  // a new event file in dir (created). resume_step >= 0: a resumed run; a SessionLog START at
  // that step comes first, so TensorBoard drops the earlier run's events from that step on,
  // as metrics.jsonl drops its lines. resume_step < 0: a fresh run; the event files already in
  // dir are removed, as metrics.jsonl starts over. Error naming the file when it cannot be
  // created.
  TensorBoardWriter(const std::string& dir, int64_t resume_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&& other) noexcept;

  // one event at `step`, wall time now; Error naming the file on a failed write
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);
  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace nanochat
