#include "parquet/assemble.h"

#include "parquet/errors.h"

namespace nanochat {

using nlohmann::json;

json leaf_value_json(const SchemaElement& e, const ColumnValues& v, int64_t i) {
  switch (e.type) {
    case kBoolean: return json(v.ints[(size_t)i] != 0);
    case kInt32:
      if (e.logical_unsigned) return json((uint64_t)(uint32_t)v.ints[(size_t)i]);
      return json(v.ints[(size_t)i]);
    case kInt64:
      if (e.logical_unsigned) return json((uint64_t)v.ints[(size_t)i]);
      return json(v.ints[(size_t)i]);
    case kFloat:
    case kDouble: return json(v.doubles[(size_t)i]);
    default: return json(v.strings[(size_t)i]);  // bytes as they are; UTF-8 for STRING columns
  }
}

std::string leaf_value_string(const SchemaElement& e, const ColumnValues& v, int64_t i) {
  switch (e.type) {
    case kBoolean: return v.ints[(size_t)i] ? "true" : "false";
    case kInt32:
    case kInt64:
    case kFloat:
    case kDouble: return leaf_value_json(e, v, i).dump();
    default: return v.strings[(size_t)i];
  }
}

namespace {

struct Cursor {
  const ColumnData* data = nullptr;
  int64_t level = 0, value = 0;
};

struct Assembler {
  const Schema& s;
  std::vector<Cursor> cur;  // by leaf index

  const SchemaNode& leaf_node(int leaf) const { return s.nodes[(size_t)s.leaf_nodes[(size_t)leaf]]; }
  bool at_end(int leaf) const { return cur[(size_t)leaf].level >= cur[(size_t)leaf].data->num_levels; }
  void need(int leaf) const {
    if (at_end(leaf)) parquet_fail("column '%s': levels end before the rows do", leaf_node(leaf).path.c_str());
  }
  int def(int leaf) const {
    need(leaf);
    const Cursor& c = cur[(size_t)leaf];
    return c.data->def.empty() ? leaf_node(leaf).def_level : c.data->def[(size_t)c.level];
  }
  int rep(int leaf) const {
    need(leaf);
    const Cursor& c = cur[(size_t)leaf];
    return c.data->rep.empty() ? 0 : c.data->rep[(size_t)c.level];
  }

  // one entry of every leaf below `node` stands for a null or empty value at `node`
  void skip_entry(const SchemaNode& node) {
    for (int leaf : node.leaves) {
      need(leaf);
      Cursor& c = cur[(size_t)leaf];
      if (def(leaf) == leaf_node(leaf).def_level) c.value++;  // only when leaves are out of step
      c.level++;
    }
  }

  json leaf_value(int leaf) {
    const SchemaNode& n = leaf_node(leaf);
    if (def(leaf) != n.def_level) parquet_fail("column '%s': levels out of step", n.path.c_str());
    Cursor& c = cur[(size_t)leaf];
    if (c.value >= c.data->values.size(n.element.type))
      parquet_fail("column '%s': more non-null levels than values", n.path.c_str());
    json v = leaf_value_json(n.element, c.data->values, c.value);
    c.value++;
    c.level++;
    return v;
  }

  json read_field(int index) {
    const SchemaNode& n = s.nodes[(size_t)index];
    if (n.element.repetition == kRepeated) return read_repeated(index, false);  // a bare repeated field
    if (n.element.repetition == kOptional && def(n.leaves[0]) < n.def_level) {
      skip_entry(n);
      return json(nullptr);
    }
    return read_item(index);
  }

  // the items of repeated node `index`: its single child each (LIST's element) or itself
  json read_repeated(int index, bool items_are_child) {
    const SchemaNode& r = s.nodes[(size_t)index];
    int first = r.leaves[0];
    if (def(first) < r.def_level) {  // an empty list
      skip_entry(r);
      return json::array();
    }
    json items = json::array();
    for (;;) {
      items.push_back(items_are_child ? read_field(r.children[0]) : read_item(index));
      if (at_end(first)) break;
      int next = rep(first);
      if (next < r.rep_level) break;
      if (next > r.rep_level) parquet_fail("column '%s': repetition levels out of step", leaf_node(first).path.c_str());
    }
    return items;
  }

  // node `index` is present (its definition level is reached)
  json read_item(int index) {
    const SchemaNode& n = s.nodes[(size_t)index];
    if (n.leaf >= 0) return leaf_value(n.leaf);
    bool list_like = n.element.logical_type == "LIST" || n.element.logical_type == "MAP" ||
                     n.element.converted_type == kConvMapKeyValue;
    if (list_like && n.children.size() == 1 && s.nodes[(size_t)n.children[0]].element.repetition == kRepeated) {
      int r = n.children[0];
      const SchemaNode& rn = s.nodes[(size_t)r];
      // three-level lists: repeated group list { element }; the older two-level forms use
      // the repeated node itself as the element (parquet-format's backward-compatibility rules)
      bool three_level = n.element.logical_type == "LIST" && rn.leaf < 0 && rn.children.size() == 1 &&
                         rn.element.name != "array" && rn.element.name != n.element.name + "_tuple";
      return read_repeated(r, three_level);
    }
    json obj = json::object();
    for (int c : n.children) obj[s.nodes[(size_t)c].element.name] = read_field(c);
    return obj;
  }
};

}  // namespace

std::vector<json> assemble_rows(const Schema& schema, const std::vector<int>& top_nodes,
                                const std::vector<const ColumnData*>& leaf_data, int64_t num_rows) {
  Assembler a{schema, std::vector<Cursor>(schema.leaf_nodes.size())};
  for (size_t i = 0; i < leaf_data.size() && i < a.cur.size(); i++) a.cur[i].data = leaf_data[i];
  for (int t : top_nodes)
    for (int leaf : schema.nodes[(size_t)t].leaves)
      if (!a.cur[(size_t)leaf].data) parquet_fail("internal: column %d not read", leaf);
  std::vector<json> rows;
  if (!top_nodes.empty())  // each row takes at least one level of every column: don't trust num_rows alone
    rows.reserve((size_t)std::min<int64_t>(
        num_rows, a.cur[(size_t)schema.nodes[(size_t)top_nodes[0]].leaves[0]].data->num_levels));
  for (int64_t r = 0; r < num_rows; r++) {
    json row = json::object();
    for (int t : top_nodes) {
      const SchemaNode& n = schema.nodes[(size_t)t];
      if (a.rep(n.leaves[0]) != 0)
        parquet_fail("column '%s': row %lld does not start at repetition level 0", n.path.c_str(), (long long)r);
      row[n.element.name] = a.read_field(t);
    }
    rows.push_back(std::move(row));
  }
  for (int t : top_nodes)
    for (int leaf : schema.nodes[(size_t)t].leaves) {
      const Cursor& c = a.cur[(size_t)leaf];
      if (c.level != c.data->num_levels || c.value != c.data->values.size(a.leaf_node(leaf).element.type))
        parquet_fail("column '%s': %lld levels left over after the row group's %lld rows",
                     a.leaf_node(leaf).path.c_str(), (long long)(c.data->num_levels - c.level), (long long)num_rows);
    }
  return rows;
}

}  // namespace nanochat
