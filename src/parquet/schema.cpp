#include "parquet/schema.h"

#include "parquet/errors.h"

namespace nanochat {

static const int kMaxSchemaDepth = 32;

// consumes the subtree starting at elements[*next]; returns its node index
static int build_node(const std::vector<SchemaElement>& elements, size_t* next, int parent, int depth, Schema& s) {
  if (depth > kMaxSchemaDepth) parquet_fail("schema nested deeper than %d levels", kMaxSchemaDepth);
  if (*next >= elements.size()) parquet_fail("schema ends in the middle of a group");
  const SchemaElement& e = elements[(*next)++];
  int index = (int)s.nodes.size();
  s.nodes.emplace_back();
  {
    SchemaNode& n = s.nodes.back();
    n.element = e;
    if (parent >= 0) {
      const SchemaNode& p = s.nodes[(size_t)parent];
      n.def_level = p.def_level + (e.repetition != kRequired);
      n.rep_level = p.rep_level + (e.repetition == kRepeated);
      n.path = p.path.empty() ? e.name : p.path + "." + e.name;
    }
  }
  if (e.num_children == 0) {
    if (parent < 0) parquet_fail("schema has no columns");
    if (e.type < 0 || e.type > kFixedLenByteArray)
      parquet_fail("schema element '%s' has no valid physical type", e.name.c_str());
    int leaf = (int)s.leaf_nodes.size();
    s.leaf_nodes.push_back(index);
    s.nodes[(size_t)index].leaf = leaf;
    s.nodes[(size_t)index].leaves.push_back(leaf);
    return index;
  }
  // each child takes at least one element, so this can't run past the list
  if ((size_t)e.num_children > elements.size() - *next)
    parquet_fail("schema group '%s' claims %d children", e.name.c_str(), e.num_children);
  for (int c = 0; c < e.num_children; c++) {
    int child = build_node(elements, next, index, depth + 1, s);
    s.nodes[(size_t)index].children.push_back(child);
    std::vector<int> child_leaves = s.nodes[(size_t)child].leaves;
    auto& leaves = s.nodes[(size_t)index].leaves;
    leaves.insert(leaves.end(), child_leaves.begin(), child_leaves.end());
  }
  return index;
}

Schema schema_build(const std::vector<SchemaElement>& elements) {
  Schema s;
  if (elements.empty()) parquet_fail("empty schema");
  size_t next = 0;
  build_node(elements, &next, -1, 0, s);
  if (next != elements.size()) parquet_fail("schema has %zu elements after its root group", elements.size() - next);
  if (s.nodes[0].element.repetition == kRepeated) s.nodes[0].element.repetition = kRequired;  // root's is meaningless
  return s;
}

static void text_node(const Schema& s, int index, int indent, std::string& out) {
  const SchemaNode& n = s.nodes[(size_t)index];
  static const char* reps[] = {"required", "optional", "repeated"};
  out += std::string((size_t)indent * 2, ' ');
  out += reps[n.element.repetition];
  out += n.children.empty() ? std::string(" ") + physical_type_name(n.element.type) : std::string(" group");
  if (n.element.type == kFixedLenByteArray) out += strprintf("(%d)", n.element.type_length);
  out += " " + n.element.name;
  if (!n.element.logical_type.empty()) out += " (" + n.element.logical_type + ")";
  out += n.children.empty() ? "\n" : " {\n";
  for (int c : n.children) text_node(s, c, indent + 1, out);
  if (!n.children.empty()) out += std::string((size_t)indent * 2, ' ') + "}\n";
}

std::string schema_text(const Schema& s) {
  std::string out = "message " + s.nodes[0].element.name + " {\n";
  for (int c : s.nodes[0].children) text_node(s, c, 1, out);
  return out + "}\n";
}

}  // namespace nanochat
