// bpe.h: the guest's byte-level BPE tokenizer (SmolLM2's and Qwen3.5's),
// over the vocabulary file the harness writes next to the model's guest
// files (/AI/SMOL/VOCAB.TOK, /AI/QWEN/VOCAB.TOK; format in
// pyllm/tokenizers/guestvocab.py). Used by tok.c and llmrun.c; plain C over
// ulib, also compiled for the host by the tests (tests/host_c/ushim).
//
//   struct bpe b;
//   if(bpe_load(&b, "/AI/SMOL/VOCAB.TOK") < 0) ... b.err says why
//   n = bpe_encode(&b, text, len, ids, cap);   // -1 when cap is too small
//                                              // (Qwen3.5: NFC first, nfc.c)
//   n = bpe_decode(&b, ids, nids, out, cap);   // raw bytes, -1 on a bad id

#define BPE_MERGES 1      // SmolLM2: the merge list decides (GPT-2 style)
#define BPE_RANKS  2      // Qwen3.5: the rank of the merged text decides

// code point classes of the pre-tokenizers (scripts/gen_uniclass.py)
#define UC_OTHER  0
#define UC_LETTER 1
#define UC_MARK   2
#define UC_NUMBER 3
#define UC_SPACE  4

struct bpe {
  int kind;               // BPE_MERGES or BPE_RANKS
  uint32 nvocab;          // ids with text
  uint32 nrows;           // valid ids (the model's embedding rows)
  uint32 nspecial, nmerges;
  uchar *file;            // the whole vocabulary file
  uchar *lens;            // per id, into the file
  uchar *strs;
  uint32 *off;            // per id: offset of its text in strs (nvocab+1)
  uint32 *specials;       // ids, longest text first
  uint32 *merges;         // (left, right) pairs in rank order, in the file
  uint32 *tmask, *thash;  // text -> id table (open addressing, ids+1; 0 empty)
  uint32 *phash;          // kind 1: merge pair -> rank+1, merged id (4 words)
  uint32 tbits, pbits;
  uint32 byteid[256];     // the token of each single byte (~0: none)
  uchar special1[256];    // bytes a special token can start with
  const char *err;        // why bpe_load failed
};

int bpe_load(struct bpe *b, const char *path);
void bpe_free(struct bpe *b);
int bpe_encode(struct bpe *b, const uchar *text, int len, uint32 *ids, int cap);
int bpe_decode(struct bpe *b, const uint32 *ids, int n, uchar *out, int cap);
int bpe_lookup(struct bpe *b, const uchar *s, int len);   // id or -1
int uc_class(uint32 cp);
