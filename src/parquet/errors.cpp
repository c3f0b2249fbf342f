#include "parquet/errors.h"

#include <cstdarg>
#include <cstdio>

namespace nanochat {

void parquet_fail(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  throw ParquetError(buf);
}

ParquetLimits& parquet_limits() {
  static ParquetLimits limits;
  return limits;
}

}  // namespace nanochat
