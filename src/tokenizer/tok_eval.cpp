// Tokenizer evaluation (upstream's scripts/tok_eval.py): bytes per token of each text for our tokenizer and for
// comparison tokenizers, with the relative difference. The built-in samples were written
// for this project.
#include "nanochat/common/error.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

std::vector<TokEvalText> tok_eval_builtin_texts() {
  return {
      {"news",
       "The city council voted 7-2 on Tuesday night to approve a new budget for public transit, ending months of "
       "debate over fares and service cuts. Under the plan, bus routes that were suspended during the winter will "
       "return by March, and a pilot program will let riders under 18 travel for free on weekends.\n\n"
       "\"This is a budget that puts people first,\" said council member Dana Ortiz, who chaired the transit "
       "committee. Critics argued the city was drawing too heavily on its reserve fund, which now stands at $41.3 "
       "million, down from $58 million two years ago. The mayor is expected to sign the measure later this week."},
      {"korean",
       "지난 주말 서울에서 열린 국제 도서전에는 약 15만 명의 방문객이 찾아왔다. 올해 행사에서는 인공지능과 "
       "출판의 미래를 주제로 한 강연이 특히 큰 관심을 모았다. 한 출판사 대표는 \"독자들이 여전히 종이책의 "
       "촉감을 좋아한다\"며 \"기술은 도구일 뿐, 이야기를 대신할 수는 없다\"고 말했다. 주최 측은 내년에는 "
       "해외 작가 초청을 두 배로 늘릴 계획이라고 밝혔다."},
      {"code",
       "#include <stdio.h>\n#include <stdlib.h>\n\n// count how often each byte value occurs in a file\n"
       "int main(int argc, char** argv) {\n    if (argc != 2) {\n        fprintf(stderr, \"usage: %s FILE\\n\", argv[0]);\n"
       "        return 2;\n    }\n    FILE* f = fopen(argv[1], \"rb\");\n    if (!f) { perror(argv[1]); return 1; }\n"
       "    long counts[256] = {0};\n    int c;\n    while ((c = fgetc(f)) != EOF) counts[c]++;\n    fclose(f);\n"
       "    for (int i = 0; i < 256; i++)\n        if (counts[i]) printf(\"%3d %ld\\n\", i, counts[i]);\n    return 0;\n}\n"},
      {"math",
       "\\begin{theorem}[Cauchy--Schwarz]\nFor all vectors $u, v$ in an inner product space,\n"
       "\\[ |\\langle u, v \\rangle|^2 \\le \\langle u, u \\rangle \\cdot \\langle v, v \\rangle . \\]\n\\end{theorem}\n"
       "\\begin{proof}\nIf $v = 0$ both sides vanish. Otherwise let $\\lambda = \\langle u, v\\rangle / \\|v\\|^2$ and "
       "expand $0 \\le \\| u - \\lambda v \\|^2 = \\|u\\|^2 - \\frac{|\\langle u, v\\rangle|^2}{\\|v\\|^2}$, "
       "which rearranges to the claim. Equality holds iff $u$ and $v$ are linearly dependent.\n\\end{proof}\n"
       "A corollary: $\\sum_{i=1}^{n} a_i b_i \\le \\sqrt{\\sum_i a_i^2}\\,\\sqrt{\\sum_i b_i^2}$."},
      {"science",
       "Photosynthesis converts light energy into chemical energy stored in glucose. In the light-dependent "
       "reactions, which take place in the thylakoid membranes, water molecules are split, releasing O2 and "
       "producing ATP and NADPH. The Calvin cycle then uses these carriers to fix CO2 into three-carbon sugars. "
       "Measured across the globe, photosynthetic organisms capture roughly 130 terawatts of power, about six "
       "times the current energy consumption of human civilization. Efficiency is limited in part by the enzyme "
       "RuBisCO, which also reacts with oxygen in a wasteful process called photorespiration."},
  };
}

std::string tok_eval_report(const std::vector<TokEvalText>& texts, const Tokenizer& ours,
                            const std::vector<std::pair<std::string, const Tokenizer*>>& others, bool color) {
  const char* green = color ? "\033[32m" : "";
  const char* red = color ? "\033[31m" : "";
  const char* reset = color ? "\033[0m" : "";
  std::vector<size_t> our_tokens;
  for (auto& t : texts) {
    auto ids = ours.encode(t.text);
    if (ours.decode(ids) != t.text) fail("tokenizer does not round-trip the text '%s'", t.name.c_str());
    our_tokens.push_back(ids.size());
  }
  std::string s = strprintf("Vocab sizes: ours %d", ours.vocab_size());
  for (auto& [name, tok] : others) s += strprintf(", %s %d", name.c_str(), tok->vocab_size());
  s += "\n";
  if (others.empty()) {
    s += strprintf("\n%-16s %9s %9s %7s\n", "text", "bytes", "tokens", "ratio");
    for (size_t i = 0; i < texts.size(); i++)
      s += strprintf("%-16s %9zu %9zu %7.2f\n", texts[i].name.c_str(), texts[i].text.size(), our_tokens[i],
                     (double)texts[i].text.size() / std::max<size_t>(1, our_tokens[i]));
  }
  for (auto& [name, tok] : others) {
    s += strprintf("\nComparison with %s (ratio = bytes per token; diff = fewer tokens than %s)\n", name.c_str(),
                   name.c_str());
    s += strprintf("%-16s %9s %9s %7s %9s %7s %9s  %s\n", "text", "bytes", name.c_str(), "ratio", "ours", "ratio",
                   "diff %", "better");
    for (size_t i = 0; i < texts.size(); i++) {
      size_t bytes = texts[i].text.size(), theirs = tok->encode(texts[i].text).size(), mine = our_tokens[i];
      double diff = theirs ? 100.0 * ((double)theirs - (double)mine) / (double)theirs : 0.0;
      bool we_win = mine < theirs, tie = mine == theirs;
      s += strprintf("%-16s %9zu %9zu %7.2f %9zu %7.2f %s%+8.1f%%%s  %s\n", texts[i].name.c_str(), bytes, theirs,
                     (double)bytes / std::max<size_t>(1, theirs), mine, (double)bytes / std::max<size_t>(1, mine),
                     tie ? "" : (we_win ? green : red), diff, tie ? "" : reset,
                     tie ? "tie" : (we_win ? "ours" : name.c_str()));
    }
  }
  return s;
}

}  // namespace nanochat
