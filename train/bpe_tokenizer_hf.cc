// BpeTokenizer::from_hf_json: Hugging Face's tokenizer.json (and tokenizer_config.json) read part by
// part, each part refusing by name what this runtime does not implement.
#include <algorithm>
#include <functional>
#include <optional>

#include "common/json.h"
#include "train/bpe_tokenizer.h"

namespace fsdp::train {
namespace {

std::string type_of(const json::Value& v) {
  const json::Value* t = v.find("type");
  return t != nullptr && t->kind == json::Value::Kind::kString ? t->str : std::string("?");
}

bool flag(const json::Value& v, std::string_view key, bool fallback = false) {
  const json::Value* f = v.find(key);
  return f != nullptr && f->kind == json::Value::Kind::kBool ? f->b : fallback;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_hf_json(std::string_view tokenizer_json, std::string_view config_json,
                                        const std::string& source) {
  BpeTokenizer t;
  t.source_ = source;
  t.kind_ = "tokenizer.json";
  json::Value doc;
  try {
    doc = json::parse(tokenizer_json);
  } catch (const std::exception& e) {
    throw t.error(std::string("not JSON: ") + e.what());
  }
  if (doc.kind != json::Value::Kind::kObject) throw t.error("not a JSON object");
  try {
    const size_t model_vocab = t.read_hf_model(doc.at("model"));
    t.read_hf_pre_tokenizer(doc);
    t.read_hf_special_tokens(doc, config_json, model_vocab);
    t.read_hf_post_processor(doc);
  } catch (const TokenizerError&) {
    throw;
  } catch (const std::exception& e) {
    throw t.error(e.what());
  }
  // TorchTitan's test: does the tokenizer itself add BOS / EOS to an empty text?
  const std::vector<Token> empty = t.encode("");
  t.adds_bos_ = t.bos_id_ && std::find(empty.begin(), empty.end(), *t.bos_id_) != empty.end();
  t.adds_eos_ = t.eos_id_ && std::find(empty.begin(), empty.end(), *t.eos_id_) != empty.end();
  return t;
}

// model: vocabulary and merges. Returns the model vocabulary's size (added tokens come after it).
size_t BpeTokenizer::read_hf_model(const json::Value& model) {
  const json::Value* type = model.find("type");
  if (type != nullptr && type->string() != "BPE") {
    throw error("model.type '" + type->string() + "' is not supported (only BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json::Value* v = model.find(key);
    if (v != nullptr && !v->is_null() && !v->string().empty()) {
      throw error(std::string("model.") + key + " = '" + v->string() + "' is not supported");
    }
  }
  if (const json::Value* d = model.find("dropout"); d != nullptr && !d->is_null() && d->number() != 0) {
    throw error("model.dropout is not supported (training data must tokenize deterministically)");
  }
  byte_fallback_ = flag(model, "byte_fallback");
  ignore_merges_ = flag(model, "ignore_merges");
  fuse_unk_ = flag(model, "fuse_unk");
  for (const auto& [text, id] : model.at("vocab").object()) add_token(text, static_cast<Token>(id.integer()));
  const size_t model_vocab = vocab_.size();
  if (const json::Value* unk = model.find("unk_token"); unk != nullptr && !unk->is_null()) {
    unk_id_ = token_to_id(unk->string());
    if (!unk_id_) throw error("model.unk_token '" + unk->string() + "' is not in the vocabulary");
  }
  const auto& merges = model.at("merges").array();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string a, b;
    if (merges[rank].kind == json::Value::Kind::kString) {  // "a b"
      const std::string& m = merges[rank].str;
      const size_t space = m.find(' ');
      if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos) {
        throw error("merge " + std::to_string(rank) + " '" + m + "' is not two tokens separated by one space");
      }
      a = m.substr(0, space);
      b = m.substr(space + 1);
    } else {  // ["a", "b"]
      const auto& pair = merges[rank].array();
      if (pair.size() != 2) throw error("merge " + std::to_string(rank) + " is not a pair");
      a = pair[0].string();
      b = pair[1].string();
    }
    const auto ia = token_to_id(a), ib = token_to_id(b), im = token_to_id(a + b);
    if (!ia || !ib || !im) {
      throw error("merge " + std::to_string(rank) + " ('" + a + "', '" + b + "') names a token not in the vocabulary");
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(*ia)) << 32) | static_cast<uint32_t>(*ib);
    merges_[key] = Merge{static_cast<uint32_t>(rank), *im};
  }
  return model_vocab;
}

// normalizer (none is supported) and pre_tokenizer.
void BpeTokenizer::read_hf_pre_tokenizer(const json::Value& doc) {
  if (const json::Value* n = doc.find("normalizer"); n != nullptr && !n->is_null()) {
    throw error("normalizer '" + type_of(*n) + "' is not supported (only none, as GPT-2's and Llama 3's)");
  }
  bool byte_level = false;
  std::function<void(const json::Value&)> add_step = [&](const json::Value& p) {
    const std::string kind = type_of(p);
    if (kind == "Sequence") {
      for (const auto& inner : p.at("pretokenizers").array()) add_step(inner);
    } else if (kind == "ByteLevel") {
      PreTokenizerStep s;
      s.kind = PreTokenizerStep::Kind::kByteLevel;
      s.use_regex = flag(p, "use_regex", true);
      s.add_prefix_space = flag(p, "add_prefix_space", true);
      steps_.push_back(s);
      byte_level = true;
    } else if (kind == "Split") {
      if (byte_level) throw error("a Split pre-tokenizer after ByteLevel is not supported");
      const json::Value& pattern = p.at("pattern");
      const json::Value* regex = pattern.find("Regex");
      if (regex == nullptr) throw error("a Split pre-tokenizer on a plain string is not supported (only Regex)");
      const auto known = find_split_pattern(regex->string());
      if (!known) {
        throw error("Split pattern '" + regex->string() +
                    "' is not one this runtime matches (GPT-2's, Llama 3's or Qwen 2's)");
      }
      const json::Value* behavior = p.find("behavior");
      if ((behavior != nullptr && behavior->string() != "Isolated") || flag(p, "invert")) {
        throw error("Split behavior must be Isolated, not inverted");
      }
      PreTokenizerStep s;
      s.kind = PreTokenizerStep::Kind::kSplit;
      s.pattern = *known;
      steps_.push_back(s);
    } else {
      throw error("pre_tokenizer '" + kind + "' is not supported (ByteLevel, Split, Sequence)");
    }
  };
  if (const json::Value* p = doc.find("pre_tokenizer"); p != nullptr && !p->is_null()) add_step(*p);
  byte_level_symbols_ = byte_level;
  for (size_t id = 0; id < id_to_token_.size(); ++id) is_byte_level_token_[id] = byte_level;
}

// Added tokens of the file, then the special tokens tokenizer_config.json names.
void BpeTokenizer::read_hf_special_tokens(const json::Value& doc, std::string_view config_json, size_t model_vocab) {
  if (const json::Value* added = doc.find("added_tokens"); added != nullptr && !added->is_null()) {
    for (const auto& a : added->array()) {
      register_added(AddedToken{a.at("content").string(), static_cast<Token>(a.at("id").integer()), flag(a, "special"),
                                flag(a, "lstrip"), flag(a, "rstrip"), flag(a, "single_word")});
    }
  }
  std::optional<std::string> bos_text, eos_text;
  if (!config_json.empty()) {
    json::Value config;
    try {
      config = json::parse(config_json);
    } catch (const std::exception& e) {
      throw error(std::string("tokenizer_config.json is not JSON: ") + e.what());
    }
    // Hugging Face's add_special_tokens: a token already known keeps its id; a new one takes the next
    // id after the model vocabulary (or after the largest added id when that is beyond it).
    Token next = static_cast<Token>(model_vocab);
    for (const auto& a : added_) {
      if (a.id >= static_cast<Token>(model_vocab)) next = std::max(next, a.id + 1);
    }
    const auto add_special = [&](const std::string& content, const json::Value* props) {
      if (content.empty()) return;
      AddedToken token{content, 0, true, false, false, false};
      if (props != nullptr && props->kind == json::Value::Kind::kObject) {
        token.special = flag(*props, "special", true);
        token.lstrip = flag(*props, "lstrip");
        token.rstrip = flag(*props, "rstrip");
        token.single_word = flag(*props, "single_word");
      }
      const auto known = token_to_id(content);
      token.id = known ? *known : next++;
      register_added(token);
    };
    const auto text_of = [](const json::Value& v) -> std::optional<std::string> {
      if (v.kind == json::Value::Kind::kString) return v.str;
      if (v.kind == json::Value::Kind::kObject && v.find("content") != nullptr) return v.at("content").string();
      return std::nullopt;
    };
    for (const char* key :
         {"bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token"}) {
      const json::Value* v = config.find(key);
      if (v == nullptr) continue;
      const auto text = text_of(*v);
      if (!text) continue;
      if (std::string_view(key) == "bos_token") bos_text = text;
      if (std::string_view(key) == "eos_token") eos_text = text;
      add_special(*text, v);
    }
    if (const json::Value* dec = config.find("added_tokens_decoder"); dec != nullptr && !dec->is_null()) {
      for (const auto& [id, props] : dec->object()) {
        if (props.kind == json::Value::Kind::kObject && props.find("content") != nullptr) {
          add_special(props.at("content").string(), &props);
        }
      }
    }
  }
  if (bos_text) bos_id_ = token_to_id(*bos_text);
  if (eos_text) eos_id_ = token_to_id(*eos_text);
}

// post_processor: TemplateProcessing's "single" adds tokens around the sequence.
void BpeTokenizer::read_hf_post_processor(const json::Value& doc) {
  std::function<void(const json::Value&)> add_post = [&](const json::Value& p) {
    const std::string kind = type_of(p);
    if (kind == "Sequence") {
      for (const auto& inner : p.at("processors").array()) add_post(inner);
    } else if (kind == "TemplateProcessing") {
      const json::Value& specials = p.at("special_tokens");
      for (const auto& piece : p.at("single").array()) {
        if (const json::Value* st = piece.find("SpecialToken")) {
          for (const auto& id : specials.at(st->at("id").string()).at("ids").array()) {
            template_.push_back(static_cast<Token>(id.integer()));
          }
        } else {
          template_.push_back(std::nullopt);
        }
      }
    } else if (kind != "ByteLevel") {
      throw error("post_processor '" + kind + "' is not supported (ByteLevel, TemplateProcessing, Sequence)");
    }
  };
  if (const json::Value* p = doc.find("post_processor"); p != nullptr && !p->is_null()) add_post(*p);
}

}  // namespace fsdp::train
