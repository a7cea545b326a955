// spm.cc - the C shim over SentencePiece (see spm.h). Every entry point
// catches all exceptions; nothing C++ leaks through the interface.
#include "spm.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <pthread.h>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

enum DecodeAs : unsigned char
{
	DECODE_PIECE,
	DECODE_SKIP,
	DECODE_UNKNOWN_TEXT
};

struct SpmModel
{
	sentencepiece::SentencePieceProcessor processor;	// the source side, or both
	// a vocabulary pair (spm_load_pair): the target side, the id -> piece
	// table and its inverse, and the special ids {pad, unk, bos, eos}
	std::unique_ptr<sentencepiece::SentencePieceProcessor> target;
	std::vector<std::string> pieces;
	std::unordered_map<std::string, int> ids;
	int			special[4] = {-1, -1, -1, -1};
	std::vector<int> added;		// ids whose pieces are cut out of text before SentencePiece (spm_set_added)
	// a pair's decoding of each id: its piece, nothing (specials, spm_set_skipped) or the
	// unknown piece's text (spm_set_added); one lookup per id however many are listed
	std::vector<unsigned char> decode_as;

	bool		pair() const
	{
		return target != nullptr;
	}
	const sentencepiece::SentencePieceProcessor &side(SpmSide s) const
	{
		return s == SPM_TARGET && target != nullptr ? *target : processor;
	}
};

namespace
{

// Copies msg into err (always NUL-terminated) and returns -1.
int
fail(char *err, size_t errlen, const std::string &msg)
{
	if (err != nullptr && errlen > 0)
	{
		size_t		n = msg.size() < errlen - 1 ? msg.size() : errlen - 1;

		while (n > 0 && (msg[n - 1] == ' ' || msg[n - 1] == '\n'))
			n--;

		std::memcpy(err, msg.data(), n);
		err[n] = '\0';
	}
	return -1;
}

// Copies s into a malloc'd NUL-terminated buffer; nullptr when out of memory.
char *
dup_buffer(const std::string &s)
{
	char	   *p = static_cast<char *>(std::malloc(s.size() + 1));

	if (p != nullptr)
	{
		std::memcpy(p, s.data(), s.size());
		p[s.size()] = '\0';
	}
	return p;
}

// ---------------------------------------------------------------------------
// SentencePiece trusts a model's precompiled character maps (the normalizer's
// and denormalizer's): a crafted one makes Normalize() read outside them (a
// crash found by test/fuzz/fuzz_vocabulary). spm_load checks them first, with
// a walk of the protobuf wire format (ModelProto field 3 normalizer_spec and 5
// denormalizer_spec; NormalizerSpec field 2 precompiled_charsmap).

// Reads a varint at *p (before end); false when truncated or longer than 10 bytes.
bool
read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 70 && *p < end; shift += 7)
	{
		unsigned char b = *(*p)++;

		*v |= static_cast<uint64_t>(b & 0x7f) << shift;
		if ((b & 0x80) == 0)
			return true;
	}
	return false;
}

// Calls visit(field, data, len) for each length-delimited field of the
// message [p, end); false when the message is malformed or visit refuses.
template <typename Visit>
bool
each_bytes_field(const unsigned char *p, const unsigned char *end, Visit visit)
{
	while (p < end)
	{
		uint64_t	key,
					n;

		if (!read_varint(&p, end, &key))
			return false;
		switch (key & 7)
		{
			case 0:
				if (!read_varint(&p, end, &n))
					return false;
				break;
			case 1:
				if (end - p < 8)
					return false;
				p += 8;
				break;
			case 5:
				if (end - p < 4)
					return false;
				p += 4;
				break;
			case 2:
				if (!read_varint(&p, end, &n) || n > static_cast<uint64_t>(end - p))
					return false;
				if (!visit(key >> 3, p, static_cast<size_t>(n)))
					return false;
				p += n;
				break;
			default:
				return false;
		}
	}
	return true;
}

uint32_t
le32(const unsigned char *p)
{
	return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
		static_cast<uint32_t>(p[3]) << 24;
}

// A precompiled charsmap: a uint32 trie size, the trie (darts-clone units),
// then NUL-terminated strings that the trie's values point into. Every
// child position a lookup can compute must lie inside the trie, and every
// value a lookup can read must start a NUL-terminated string.
bool
charsmap_ok(const unsigned char *blob, size_t len)
{
	if (len == 0)
		return true;
	if (len < 4)
		return false;
	uint32_t	trie_bytes = le32(blob);

	if (trie_bytes > len - 4 || trie_bytes % 4 != 0)
		return false;
	const unsigned char *units = blob + 4;
	uint64_t	n = trie_bytes / 4;
	const unsigned char *strings = units + trie_bytes;
	size_t		strings_len = len - 4 - trie_bytes;

	for (uint64_t i = 0; i < n; i++)
	{
		uint32_t	u = le32(units + 4 * i);

		if (u & (1u << 31))
			continue;			// a value unit: no children
		uint64_t	offset = static_cast<uint64_t>(u >> 10) << ((u & (1u << 9)) >> 6);
		uint64_t	child = i ^ offset;

		if ((child | 0xff) >= n)	// a lookup reads array[child ^ byte] for any byte
			return false;
		if ((u >> 8) & 1)		// has a leaf: array[child] holds a value
		{
			uint32_t	value = le32(units + 4 * child) & 0x7fffffffu;

			if (value >= strings_len || std::memchr(strings + value, '\0', strings_len - value) == nullptr)
				return false;
		}
	}
	return true;
}

// What check_charsmaps found.
enum CharsmapCheck
{
	CHARSMAPS_OK,
	CHARSMAP_BAD,				// a character map is malformed
	UNCHECKED					// the bytes are no protobuf this walk reads (SentencePiece decides)
};

// Checks the model's normalizer and denormalizer character maps.
CharsmapCheck
check_charsmaps(const unsigned char *bytes, size_t len)
{
	bool		bad = false;
	bool		walked = each_bytes_field(bytes, bytes + len,
										  [&bad](uint64_t field, const unsigned char *spec, size_t spec_len) {
		if (field != 3 && field != 5)
			return true;
		return each_bytes_field(spec, spec + spec_len, [&bad](uint64_t f, const unsigned char *map, size_t map_len) {
			if (f == 2 && !charsmap_ok(map, map_len))
				bad = true;
			return !bad;
		});
	});

	return bad ? CHARSMAP_BAD : walked ? CHARSMAPS_OK : UNCHECKED;
}

// Runs body(), turning any exception into fail(); body returns 0 or fail().
template <typename Body>
int
guarded(char *err, size_t errlen, Body body)
{
	try
	{
		return body();
	}
	catch (const std::exception &e)
	{
		return fail(err, errlen, e.what());
	}
	catch (...)
	{
		return fail(err, errlen, "unknown SentencePiece error");
	}
}

// Feeds an in-memory array of sentences to the trainer.
class ArrayIterator : public sentencepiece::SentenceIterator
{
public:
	explicit ArrayIterator(const std::vector<std::string> &sentences)
	:	sentences_(sentences)
	{
	}
	bool		done() const override
	{
		return i_ >= sentences_.size();
	}
	void		Next() override
	{
		i_++;
	}
	const std::string &value() const override
	{
		return sentences_[i_];
	}
	sentencepiece::util::Status status() const override
	{
		return sentencepiece::util::Status();
	}

private:
	const std::vector<std::string> &sentences_;
	size_t		i_ = 0;
};

}							// namespace

extern "C" int
spm_train(const char *const *sentences, const size_t *lengths, size_t n,
		  const SpmTrainOptions *options, char **model, size_t *model_len,
		  char *err, size_t errlen)
{
	return guarded(err, errlen, [&]() -> int {
		std::vector<std::string> input;

		input.reserve(n);
		for (size_t i = 0; i < n; i++)
			input.emplace_back(sentences[i], lengths[i]);
		std::unordered_map<std::string, std::string> kwargs = {
			{"vocab_size", std::to_string(options->vocab_size)},
			{"model_type", options->model_type},
			{"character_coverage", std::to_string(options->character_coverage)},
			{"byte_fallback", options->byte_fallback ? "true" : "false"},
			{"num_threads", std::to_string(options->num_threads > 0 ? options->num_threads : 1)},
			{"pad_id", std::to_string(SPM_PAD_ID)},
			{"unk_id", std::to_string(SPM_UNK_ID)},
			{"bos_id", std::to_string(SPM_BOS_ID)},
			{"eos_id", std::to_string(SPM_EOS_ID)},
			{"input_sentence_size", "0"},
			{"shuffle_input_sentence", "false"},
			{"max_sentence_length", "65536"},
		};
		ArrayIterator iterator(input);
		std::string serialized;
		sentencepiece::util::Status status;

		// The trainer's threads inherit this mask: every signal stays with
		// the calling thread.
		sigset_t	all,
					old;

		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		try
		{
			status = sentencepiece::SentencePieceTrainer::Train(kwargs, &iterator, &serialized);
		}
		catch (...)
		{
			pthread_sigmask(SIG_SETMASK, &old, nullptr);
			throw;
		}
		pthread_sigmask(SIG_SETMASK, &old, nullptr);
		if (!status.ok())
			return fail(err, errlen, status.ToString());
		*model = static_cast<char *>(std::malloc(serialized.size() + 1));
		if (*model == nullptr)
			return fail(err, errlen, "out of memory");
		std::memcpy(*model, serialized.data(), serialized.size());
		*model_len = serialized.size();
		return 0;
	});
}

namespace
{

// Length in bytes of the whitespace character (Python's str.isspace: the
// ASCII controls 9-13 and 28-31, space, U+0085, U+00A0, U+1680, U+2000-U+200A,
// U+2028, U+2029, U+202F, U+205F, U+3000) that s[i..] begins with, or 0.
size_t
space_at(const std::string &s, size_t i)
{
	const unsigned char *c = reinterpret_cast<const unsigned char *>(s.data()) + i;
	size_t		left = s.size() - i;
	unsigned	cp;
	size_t		n;

	if (left == 0)
		return 0;
	if (c[0] < 0x80)
		return (c[0] >= 9 && c[0] <= 13) || (c[0] >= 28 && c[0] <= 32) ? 1 : 0;
	if ((c[0] & 0xE0) == 0xC0 && left >= 2)
		cp = ((c[0] & 0x1Fu) << 6) | (c[1] & 0x3Fu), n = 2;
	else if ((c[0] & 0xF0) == 0xE0 && left >= 3)
		cp = ((c[0] & 0x0Fu) << 12) | ((c[1] & 0x3Fu) << 6) | (c[2] & 0x3Fu), n = 3;
	else
		return 0;
	return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
		cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 ? n : 0;
}

// Replaces every occurrence of from in s by to, left to right, as Python's str.replace.
void
replace_all(std::string *s, const std::string &from, const std::string &to)
{
	std::string out;
	size_t		at = 0,
				hit;

	while ((hit = s->find(from, at)) != std::string::npos)
	{
		out.append(*s, at, hit - at);
		out += to;
		at = hit + from.size();
	}
	out.append(*s, at, std::string::npos);
	*s = std::move(out);
}

// A vocabulary pair's text, as transformers 4.40's MarianTokenizer.decode
// (skip_special_tokens, clean_up_tokenization_spaces: both its defaults for
// OPUS-MT tokenizers) makes it from the text the target model decoded: pieces
// it does not know (source-side pieces of the joint table) come out of
// SentencePiece verbatim, so every remaining U+2581 becomes a space; the
// result is stripped of whitespace (Python's str.strip) and then cleaned up
// (PreTrainedTokenizerBase.clean_up_tokenization: " ." -> "." and the like).
void
marian_text(std::string *text)
{
	static const char *const cleanup[][2] = {
		{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
		{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
	size_t		begin = 0,
				end,
				n;

	replace_all(text, "\xE2\x96\x81", " ");
	while ((n = space_at(*text, begin)) > 0)
		begin += n;
	end = begin;
	// the end of the last character that is not whitespace
	for (size_t i = begin; i < text->size();)
	{
		n = space_at(*text, i);
		if (n == 0)
		{
			n = 1;
			while (i + n < text->size() && ((*text)[i + n] & 0xC0) == 0x80)
				n++;
			end = i + n;
		}
		i += n;
	}
	*text = text->substr(begin, end - begin);
	for (const auto &rule : cleanup)
		replace_all(text, rule[0], rule[1]);
}

// Loads a serialized model into p after checking its character maps.
int
load_processor(const char *bytes, size_t len, sentencepiece::SentencePieceProcessor *p, char *err, size_t errlen)
{
	CharsmapCheck check = check_charsmaps(reinterpret_cast<const unsigned char *>(bytes), len);

	if (check == CHARSMAP_BAD)
		return fail(err, errlen, "a normalizer's precompiled character map is malformed "
					"(offsets outside its trie or strings)");
	sentencepiece::util::Status status = p->LoadFromSerializedProto(std::string(bytes, len));

	if (!status.ok())
		return fail(err, errlen, status.ToString());
	if (check == UNCHECKED)
		return fail(err, errlen, "the model uses protobuf encodings whose character maps cannot be checked");
	return 0;
}

// Appends the table ids of text's pieces on a pair's side to *out (pieces the table lacks: unk).
int
append_piece_ids(const SpmModel *model, SpmSide side, const std::string &text, std::vector<int> *out,
				 char *err, size_t errlen)
{
	std::vector<std::string> pieces;
	sentencepiece::util::Status status = model->side(side).Encode(text, &pieces);

	if (!status.ok())
		return fail(err, errlen, status.ToString());
	for (const std::string &piece : pieces)
	{
		auto		id = model->ids.find(piece);

		out->push_back(id != model->ids.end() ? id->second : model->special[1]);
	}
	return 0;
}

// Pieces of text on a side: a pair's table ids (unknown pieces are unk), or the model's own.
int
encode_ids(const SpmModel *model, SpmSide side, const std::string &text, std::vector<int> *out,
		   char *err, size_t errlen)
{
	if (!model->pair())
	{
		sentencepiece::util::Status status = model->processor.Encode(text, out);

		return status.ok() ? 0 : fail(err, errlen, status.ToString());
	}

	std::string rest = text;

	out->clear();
	// a leading language code ">>xx<<" of the table (Marian's multilingual targets), then the added tokens
	if (side == SPM_SOURCE && rest.compare(0, 2, ">>") == 0)
	{
		size_t		close = rest.find("<<", 2);

		if (close != std::string::npos)
		{
			auto		code = model->ids.find(rest.substr(0, close + 2));

			if (code != model->ids.end())
			{
				out->push_back(code->second);
				rest.erase(0, close + 2);
			}
		}
	}
	if (!model->added.empty())
	{
		// added tokens first, as transformers' tokenizers cut them out: the earliest, then the
		// longest there; each stretch between them is encoded alone (spm_set_added)
		size_t		at = 0;
		// each token's next occurrence at or after `at`, searched again only once passed: linear in
		// the text per token, however many added tokens it holds
		std::vector<size_t> next(model->added.size());

		for (size_t t = 0; t < model->added.size(); t++)
		{
			const std::string &token = model->pieces[model->added[t]];

			next[t] = token.empty() ? std::string::npos : rest.find(token);
		}

		while (at <= rest.size())
		{
			size_t		best = std::string::npos,
						best_len = 0;
			int			best_id = -1;

			for (size_t t = 0; t < model->added.size(); t++)
			{
				const std::string &token = model->pieces[model->added[t]];
				size_t		found;

				if (next[t] != std::string::npos && next[t] < at)
					next[t] = rest.find(token, at);
				found = next[t];
				if (found != std::string::npos &&
					(best == std::string::npos || found < best || (found == best && token.size() > best_len)))
				{
					best = found;
					best_len = token.size();
					best_id = model->added[t];
				}
			}
			if (append_piece_ids(model, side,
								 rest.substr(at, best == std::string::npos ? std::string::npos : best - at),
								 out, err, errlen) != 0)
				return -1;
			if (best == std::string::npos)
				break;
			out->push_back(best_id);
			at = best + best_len;
		}
		return 0;
	}
	return append_piece_ids(model, side, rest, out, err, errlen);
}

}							// namespace

extern "C" int
spm_load(const char *bytes, size_t len, SpmModel **out, char *err, size_t errlen)
{
	return guarded(err, errlen, [&]() -> int {
		std::unique_ptr<SpmModel> m(new SpmModel());

		if (load_processor(bytes, len, &m->processor, err, errlen) != 0)
			return -1;
		*out = m.release();
		return 0;
	});
}

extern "C" int
spm_load_pair(const char *source, size_t source_len, const char *target, size_t target_len,
			  const char *const *pieces, const size_t *lengths, int n, const int special[4],
			  SpmModel **out, char *err, size_t errlen)
{
	static const char *const names[4] = {"pad", "unk", "bos", "eos"};

	return guarded(err, errlen, [&]() -> int {
		std::unique_ptr<SpmModel> m(new SpmModel());

		m->target.reset(new sentencepiece::SentencePieceProcessor());
		if (load_processor(source, source_len, &m->processor, err, errlen) != 0 ||
			load_processor(target, target_len, m->target.get(), err, errlen) != 0)
			return -1;
		if (n < 1)
			return fail(err, errlen, "the piece table is empty");
		m->pieces.reserve(n);
		for (int id = 0; id < n; id++)
		{
			m->pieces.emplace_back(pieces[id], lengths[id]);
			auto		added = m->ids.emplace(m->pieces.back(), id);

			if (!added.second)
				return fail(err, errlen, "piece \"" + m->pieces.back() + "\" has two ids, " +
							std::to_string(added.first->second) + " and " + std::to_string(id));
		}
		for (int i = 0; i < 4; i++)
		{
			if (special[i] < (i == 1 ? 0 : -1) || special[i] >= n)
				return fail(err, errlen, std::string(names[i]) + " id " + std::to_string(special[i]) +
							" is out of range [0, " + std::to_string(n) + ")");
			m->special[i] = special[i];
		}
		m->decode_as.assign(n, DECODE_PIECE);
		for (int i = 0; i < 4; i++)
			if (m->special[i] >= 0)
				m->decode_as[m->special[i]] = DECODE_SKIP;
		*out = m.release();
		return 0;
	});
}

extern "C" int
spm_set_skipped(SpmModel *model, const int *ids, int n, char *err, size_t errlen)
{
	return guarded(err, errlen, [&]() -> int {
		if (!model->pair())
			return fail(err, errlen, "only a vocabulary pair skips ids");
		for (int i = 0; i < n; i++)
			if (ids[i] < 0 || ids[i] >= spm_size(model))
				return fail(err, errlen, "id " + std::to_string(ids[i]) + " is out of range");
		for (int i = 0; i < n; i++)
			if (model->decode_as[ids[i]] == DECODE_PIECE)
				model->decode_as[ids[i]] = DECODE_SKIP;
		return 0;
	});
}

extern "C" int
spm_set_added(SpmModel *model, const int *added, int n_added, const int *unknown_text, int n_unknown_text,
			  char *err, size_t errlen)
{
	return guarded(err, errlen, [&]() -> int {
		if (!model->pair())
			return fail(err, errlen, "only a vocabulary pair has added tokens");
		if (model->special[1] < 0)
			return fail(err, errlen, "a vocabulary pair without an unknown id has no unknown text");
		for (int i = 0; i < n_added + n_unknown_text; i++)
		{
			int			id = i < n_added ? added[i] : unknown_text[i - n_added];

			if (id < 0 || id >= spm_size(model))
				return fail(err, errlen, "id " + std::to_string(id) + " is out of range");
		}
		model->added.assign(added, added + n_added);
		for (int i = 0; i < n_unknown_text; i++)
			model->decode_as[unknown_text[i]] = DECODE_UNKNOWN_TEXT;
		return 0;
	});
}

extern "C" void
spm_free(SpmModel *model)
{
	delete model;
}

extern "C" void
spm_free_buffer(void *buffer)
{
	std::free(buffer);
}

extern "C" int
spm_size(const SpmModel *model)
{
	return model->pair() ? static_cast<int>(model->pieces.size()) : model->processor.GetPieceSize();
}


extern "C" int
spm_pad_id(const SpmModel *model)
{
	return model->pair() ? model->special[0] : model->processor.pad_id();
}

extern "C" int
spm_unk_id(const SpmModel *model)
{
	return model->pair() ? model->special[1] : model->processor.unk_id();
}

extern "C" int
spm_bos_id(const SpmModel *model)
{
	return model->pair() ? model->special[2] : model->processor.bos_id();
}

extern "C" int
spm_eos_id(const SpmModel *model)
{
	return model->pair() ? model->special[3] : model->processor.eos_id();
}

extern "C" const char *
spm_piece(const SpmModel *model, int id, size_t *len)
{
	const std::string &p = model->pair() ? model->pieces[id] : model->processor.IdToPiece(id);

	*len = p.size();
	return p.data();
}

extern "C" float
spm_score(const SpmModel *model, int id)
{
	return model->pair() ? 0.0f : model->processor.GetScore(id);
}

extern "C" int
spm_encode(const SpmModel *model, SpmSide side, const char *text, size_t len,
		   int **ids, size_t *n, char *err, size_t errlen)
{
	return guarded(err, errlen, [&]() -> int {
		std::vector<int> v;

		if (encode_ids(model, side, std::string(text, len), &v, err, errlen) != 0)
			return -1;
		*ids = static_cast<int *>(std::malloc((v.size() > 0 ? v.size() : 1) * sizeof(int)));
		if (*ids == nullptr)
			return fail(err, errlen, "out of memory");
		std::memcpy(*ids, v.data(), v.size() * sizeof(int));
		*n = v.size();
		return 0;
	});
}

extern "C" int
spm_encode_pieces(const SpmModel *model, SpmSide side, const char *text, size_t len,
				  char **pieces, size_t **offsets, size_t *n, char *err, size_t errlen)
{
	return guarded(err, errlen, [&]() -> int {
		std::vector<std::string> v;
		std::string all;

		if (model->pair())
		{
			std::vector<int> ids;

			if (encode_ids(model, side, std::string(text, len), &ids, err, errlen) != 0)
				return -1;
			for (int id : ids)
				v.push_back(model->pieces[id]);
		}
		else
		{
			sentencepiece::util::Status status = model->processor.Encode(std::string(text, len), &v);

			if (!status.ok())
				return fail(err, errlen, status.ToString());
		}
		*offsets = static_cast<size_t *>(std::malloc((v.size() + 1) * sizeof(size_t)));
		if (*offsets == nullptr)
			return fail(err, errlen, "out of memory");
		for (size_t i = 0; i < v.size(); i++)
		{
			(*offsets)[i] = all.size();
			all += v[i];
		}
		(*offsets)[v.size()] = all.size();
		*pieces = dup_buffer(all);
		if (*pieces == nullptr)
		{
			std::free(*offsets);
			return fail(err, errlen, "out of memory");
		}
		*n = v.size();
		return 0;
	});
}

extern "C" int
spm_decode(const SpmModel *model, const int *ids, size_t n,
		   char **text, size_t *len, char *err, size_t errlen)
{
	return guarded(err, errlen, [&]() -> int {
		std::vector<int> v(ids, ids + n);
		std::vector<std::string> pieces;
		std::string out;
		int			size = spm_size(model);

		for (size_t i = 0; i < n; i++)
			if (ids[i] < 0 || ids[i] >= size)
				return fail(err, errlen, "id " + std::to_string(ids[i]) + " is out of range");
		if (model->pair())
		{
			for (int id : v)
			{
				if (model->decode_as[id] == DECODE_UNKNOWN_TEXT)
				{
					// the pieces so far decoded alone, then the unknown piece's text (spm_set_added)
					std::string part;
					sentencepiece::util::Status status = model->target->Decode(pieces, &part);

					if (!status.ok())
						return fail(err, errlen, status.ToString());
					out += part + model->pieces[model->special[1]];
					pieces.clear();
				}
				else if (model->decode_as[id] == DECODE_PIECE)
					pieces.push_back(model->pieces[id]);
			}
		}
		std::string last;
		sentencepiece::util::Status status = model->pair() ? model->target->Decode(pieces, &last)
			: model->processor.Decode(v, &last);
		if (!status.ok())
			return fail(err, errlen, status.ToString());
		out += last;
		if (model->pair())
			marian_text(&out);
		*text = dup_buffer(out);
		if (*text == nullptr)
			return fail(err, errlen, "out of memory");
		*len = out.size();
		return 0;
	});
}
