// ParquetFile: open, read and check the footer, then serve row groups column chunk by
// column chunk. After the constructor nothing in Impl changes, and chunks are read with
// pread, so several threads may read row groups of one file at once.
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "nanochat/parquet.h"
#include "parquet/assemble.h"
#include "parquet/column_reader.h"
#include "parquet/errors.h"
#include "parquet/schema.h"

namespace nanochat {

using nlohmann::json;

struct ParquetFile::Impl {
  std::string path;
  int fd = -1;
  int64_t file_size = 0;
  FileMeta meta;
  Schema schema;
  std::vector<ParquetColumn> columns;
  std::vector<ParquetRowGroup> row_groups;

  ~Impl() {
    if (fd >= 0) close(fd);
  }
  void open_and_parse();
  LeafInfo leaf_info(int leaf) const;
  ColumnData read_leaf(int row_group, int leaf) const;
  int top_level_node(const std::string& name) const;
};

void pread_exact(int fd, uint8_t* buf, size_t n, int64_t offset) {
  while (n > 0) {
    ssize_t got = pread(fd, buf, n, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) parquet_fail("read failed at byte %lld: %s", (long long)offset, std::strerror(errno));
    if (got == 0)
      parquet_fail("file ends at byte %lld, before the data it should hold (truncated?)", (long long)offset);
    buf += got;
    n -= (size_t)got;
    offset += got;
  }
}

static int64_t add_saturating(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}

void ParquetFile::Impl::open_and_parse() {
  fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) parquet_fail("cannot open: %s", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) parquet_fail("cannot stat: %s", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) parquet_fail("is a directory, not a parquet file");
  file_size = (int64_t)st.st_size;
  // layout: "PAR1" | column chunks | footer (Thrift FileMetaData) | footer length (4) | "PAR1"
  if (file_size < 12) parquet_fail("not a parquet file: only %lld bytes (truncated?)", (long long)file_size);
  uint8_t head[4], tail[8];
  pread_exact(fd, head, 4, 0);
  pread_exact(fd, tail, 8, file_size - 8);
  if (std::memcmp(tail + 4, "PARE", 4) == 0) parquet_fail("encrypted parquet files are not supported");
  if (std::memcmp(head, "PAR1", 4) != 0 || std::memcmp(tail + 4, "PAR1", 4) != 0)
    parquet_fail("not a parquet file: bad magic bytes at the %s (truncated or not parquet?)",
                 std::memcmp(head, "PAR1", 4) != 0 ? "start" : "end");
  uint32_t footer_len;
  std::memcpy(&footer_len, tail, 4);
  if ((int64_t)footer_len > file_size - 12)
    parquet_fail("footer length %u larger than the file (%lld bytes)", footer_len, (long long)file_size);
  std::vector<uint8_t> footer(footer_len);
  pread_exact(fd, footer.data(), footer_len, file_size - 8 - footer_len);
  meta = parse_file_meta(footer.data(), footer.size());
  schema = schema_build(meta.schema);
  if (meta.num_rows < 0) parquet_fail("negative row count");

  for (int leaf_node : schema.leaf_nodes) {
    const SchemaNode& n = schema.nodes[(size_t)leaf_node];
    ParquetColumn c;
    c.path = n.path;
    c.physical_type = physical_type_name(n.element.type);
    c.logical_type = n.element.logical_type;
    c.max_definition_level = n.def_level;
    c.max_repetition_level = n.rep_level;
    columns.push_back(c);
  }
  int64_t total_rows = 0;
  for (size_t g = 0; g < meta.row_groups.size(); g++) {
    const RowGroupMeta& rg = meta.row_groups[g];
    if (rg.columns.size() != columns.size())
      parquet_fail("row group %zu has %zu column chunks, the schema %zu columns", g, rg.columns.size(), columns.size());
    if (rg.num_rows < 0 || rg.num_rows > meta.num_rows - total_rows)
      parquet_fail("row group %zu: row count %lld inconsistent with the file's %lld", g, (long long)rg.num_rows,
                   (long long)meta.num_rows);
    total_rows += rg.num_rows;
    ParquetRowGroup out;
    out.num_rows = rg.num_rows;
    for (size_t c = 0; c < rg.columns.size(); c++) {
      const ColumnChunkMeta& m = rg.columns[c];
      std::string chunk_path;
      for (const std::string& part : m.path) chunk_path += (chunk_path.empty() ? "" : ".") + part;
      if (!m.has_meta || chunk_path != columns[c].path)
        parquet_fail("row group %zu: column chunk %zu is '%s', the schema says '%s'", g, c, chunk_path.c_str(),
                     columns[c].path.c_str());
      out.codecs.push_back(codec_name(m.codec));
      out.column_compressed_bytes.push_back(m.total_compressed_size);
      out.column_uncompressed_bytes.push_back(m.total_uncompressed_size);
      out.compressed_bytes = add_saturating(out.compressed_bytes, m.total_compressed_size);        // footer values:
      out.uncompressed_bytes = add_saturating(out.uncompressed_bytes, m.total_uncompressed_size);  // unchecked yet
    }
    row_groups.push_back(out);
  }
  if (total_rows != meta.num_rows)
    parquet_fail("row groups hold %lld rows, the footer says %lld", (long long)total_rows, (long long)meta.num_rows);
}

LeafInfo ParquetFile::Impl::leaf_info(int leaf) const {
  const SchemaNode& n = schema.nodes[(size_t)schema.leaf_nodes[(size_t)leaf]];
  LeafInfo info;
  info.type = n.element.type;
  info.type_length = n.element.type_length;
  info.max_def = n.def_level;
  info.max_rep = n.rep_level;
  return info;
}

ColumnData ParquetFile::Impl::read_leaf(int row_group, int leaf) const {
  try {
    const ColumnChunkMeta& m = meta.row_groups[(size_t)row_group].columns[(size_t)leaf];
    return read_column_chunk(
        fd, file_size, m, leaf_info(leaf), row_groups[(size_t)row_group].num_rows,
        chunk_budget(std::min(row_groups[(size_t)row_group].compressed_bytes, file_size), (int)columns.size()));
  } catch (const ParquetError& e) {
    throw ParquetError(strprintf("%s: row group %d, column '%s': %s", path.c_str(), row_group,
                                 columns[(size_t)leaf].path.c_str(), e.what()));
  } catch (const std::bad_alloc&) {
    throw ParquetError(strprintf("%s: row group %d, column '%s': out of memory", path.c_str(), row_group,
                                 columns[(size_t)leaf].path.c_str()));
  }
}

int ParquetFile::Impl::top_level_node(const std::string& name) const {
  for (int c : schema.nodes[0].children)
    if (schema.nodes[(size_t)c].element.name == name) return c;
  std::string names;
  for (int c : schema.nodes[0].children) names += (names.empty() ? "" : ", ") + schema.nodes[(size_t)c].element.name;
  throw ParquetError(strprintf("%s: no column '%s' (columns: %s)", path.c_str(), name.c_str(), names.c_str()));
}

ParquetFile::ParquetFile(const std::string& path) : impl_(new Impl) {
  impl_->path = path;
  try {
    impl_->open_and_parse();
  } catch (const std::exception& e) {
    std::string what = dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory reading the footer" : e.what();
    delete impl_;
    throw ParquetError(strprintf("%s: %s", path.c_str(), what.c_str()));
  }
}

ParquetFile::~ParquetFile() { delete impl_; }

const std::string& ParquetFile::path() const { return impl_->path; }
int64_t ParquetFile::num_rows() const { return impl_->meta.num_rows; }
int ParquetFile::num_row_groups() const { return (int)impl_->row_groups.size(); }
const std::vector<ParquetColumn>& ParquetFile::columns() const { return impl_->columns; }
std::string ParquetFile::schema_text() const { return nanochat::schema_text(impl_->schema); }
int64_t ParquetFile::file_size() const { return impl_->file_size; }
const std::string& ParquetFile::created_by() const { return impl_->meta.created_by; }

const ParquetRowGroup& ParquetFile::row_group(int index) const {
  if (index < 0 || index >= num_row_groups())
    throw ParquetError(
        strprintf("%s: no row group %d (the file has %d)", impl_->path.c_str(), index, num_row_groups()));
  return impl_->row_groups[(size_t)index];
}

std::vector<std::string> ParquetFile::top_level_names() const {
  std::vector<std::string> names;
  for (int c : impl_->schema.nodes[0].children) names.push_back(impl_->schema.nodes[(size_t)c].element.name);
  return names;
}

std::vector<std::string> ParquetFile::read_column_strings(int rg, const std::string& column,
                                                          std::vector<uint8_t>* nulls) const {
  row_group(rg);  // range check
  const Schema& s = impl_->schema;
  const SchemaNode& n = s.nodes[(size_t)impl_->top_level_node(column)];
  if (n.leaf < 0 || n.rep_level > 0)
    throw ParquetError(strprintf("%s: column '%s' is nested (%s); read it with read_rows_json", impl_->path.c_str(),
                                 column.c_str(), n.leaf < 0 ? "a group" : "repeated"));
  ColumnData d = impl_->read_leaf(rg, n.leaf);
  std::vector<std::string> out;
  if (nulls) nulls->assign((size_t)d.num_levels, 0);
  bool all_present = d.def.empty() || d.values.size(n.element.type) == d.num_levels;
  if (all_present && (n.element.type == kByteArray || n.element.type == kFixedLenByteArray))
    return std::move(d.values.strings);  // the common case (a text column): no copy
  out.resize((size_t)d.num_levels);
  int64_t v = 0;
  for (int64_t i = 0; i < d.num_levels; i++) {
    if (!d.def.empty() && d.def[(size_t)i] != n.def_level) {
      if (nulls) (*nulls)[(size_t)i] = 1;
      continue;
    }
    if (n.element.type == kByteArray || n.element.type == kFixedLenByteArray || n.element.type == kInt96)
      out[(size_t)i] = std::move(d.values.strings[(size_t)v++]);
    else out[(size_t)i] = leaf_value_string(n.element, d.values, v++);
  }
  return out;
}

std::vector<json> ParquetFile::read_rows_json(int rg, const std::vector<std::string>& names) const {
  row_group(rg);
  const Schema& s = impl_->schema;
  std::vector<int> top;
  if (names.empty()) top = s.nodes[0].children;
  for (const std::string& name : names) {
    int node = impl_->top_level_node(name);
    if (std::find(top.begin(), top.end(), node) == top.end()) top.push_back(node);
  }
  std::vector<ColumnData> data;
  std::vector<const ColumnData*> by_leaf(s.leaf_nodes.size(), nullptr);
  std::vector<int> leaves;
  for (int t : top)
    for (int leaf : s.nodes[(size_t)t].leaves) leaves.push_back(leaf);
  data.reserve(leaves.size());
  for (int leaf : leaves) {
    if (by_leaf[(size_t)leaf]) continue;  // a column named twice
    data.push_back(impl_->read_leaf(rg, leaf));
    by_leaf[(size_t)leaf] = &data.back();
  }
  try {
    return assemble_rows(s, top, by_leaf, row_group(rg).num_rows);
  } catch (const ParquetError& e) {
    throw ParquetError(strprintf("%s: row group %d: %s", impl_->path.c_str(), rg, e.what()));
  } catch (const std::bad_alloc&) {
    throw ParquetError(strprintf("%s: row group %d: out of memory assembling rows", impl_->path.c_str(), rg));
  }
}

}  // namespace nanochat
