// bpe.c: byte-level BPE encode/decode for the guest (see bpe.h).
//
// Text flows: special tokens are cut out first (longest match, as HF
// `tokenizers` added tokens and tiktoken's allowed specials do); the rest is
// split by the model's pre-tokenizer, written out by hand from its regex
// (code point classes from the generated uniclass.h); each piece then goes
// through BPE over its raw bytes: repeatedly merge the adjacent pair of
// lowest rank, leftmost first. SmolLM2 ranks a pair by its place in the
// merge list; Qwen3.5 by the rank (= id) of the merged text, and takes a
// piece that is a token whole (tiktoken's rule).

#include "types.h"
#include "fcntl.h"
#include "user.h"
#include "bpe.h"
#include "nfc.h"
#include "uniclass.h"

#define NOPE 0xffffffffu   // no rank: the pair does not merge
#define HDRWORDS 8
#define MAGIC 0x56455042u  // "BPEV"

// ------------------------------------------------------------------ classes

static uchar ascii_class[128];

int
uc_class(uint32 cp)
{
  int lo = 0, hi = UC_NRUNS - 1;

  while(lo < hi){       // the last run starting at or before cp
    int mid = (lo + hi + 1) / 2;
    if((uc_runs[mid] >> 3) <= cp)
      lo = mid;
    else
      hi = mid - 1;
  }
  return uc_runs[lo] & 7;
}

// The code point at s (of n > 0 bytes): its class, its length in *len.
// A byte that does not start a valid UTF-8 sequence is one "other" char.
static int
cls_at(const uchar *s, int n, int *len)
{
  uint32 c = s[0], cp;
  int k;

  if(c < 0x80){
    *len = 1;
    return ascii_class[c];
  }
  if(c >= 0xc2 && c < 0xe0){ k = 2; cp = c & 0x1f; }
  else if(c >= 0xe0 && c < 0xf0){ k = 3; cp = c & 0x0f; }
  else if(c >= 0xf0 && c < 0xf5){ k = 4; cp = c & 0x07; }
  else { *len = 1; return UC_OTHER; }
  if(k > n){
    *len = 1;
    return UC_OTHER;
  }
  for(int i = 1; i < k; i++){
    if((s[i] & 0xc0) != 0x80){
      *len = 1;
      return UC_OTHER;
    }
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
     (cp >= 0xd800 && cp < 0xe000)){
    *len = 1;
    return UC_OTHER;
  }
  *len = k;
  return uc_class(cp);
}

// class of the char at s[i] in s[0..n), UC_NONE past the end
#define UC_NONE 7
static int
cls(const uchar *s, int i, int n, int *len)
{
  if(i >= n){
    *len = 0;
    return UC_NONE;
  }
  return cls_at(s + i, n - i, len);
}

// end of the run of chars from i whose class is in mask (1 << UC_*)
static int
run(const uchar *s, int i, int n, int mask)
{
  int len;

  while(i < n && (mask >> cls(s, i, n, &len) & 1))
    i += len;
  return i;
}

// ------------------------------------------------------------------ tables

static uint32
hash_bytes(const uchar *s, int n)
{
  uint32 h = 2166136261u;

  for(int i = 0; i < n; i++)
    h = (h ^ s[i]) * 16777619u;
  return h;
}

static uint32
hash_pair(uint32 a, uint32 b)
{
  uint32 h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca77u;
  return h ^ h >> 15;
}

int
bpe_lookup(struct bpe *b, const uchar *s, int len)
{
  uint32 mask = (1u << b->tbits) - 1;

  for(uint32 h = hash_bytes(s, len) & mask;; h = (h + 1) & mask){
    uint32 e = b->thash[h];
    if(e == 0)
      return -1;
    e--;
    if(b->lens[e] == len && memcmp(b->strs + b->off[e], s, len) == 0)
      return e;
  }
}

// the merge list's entry for the pair (x, y): {x, y, rank + 1, merged id},
// or an empty slot (rank word 0) if the list lacks it
static uint32 *
pair_slot(struct bpe *b, uint32 x, uint32 y)
{
  uint32 mask = (1u << b->pbits) - 1;

  for(uint32 h = hash_pair(x, y) & mask;; h = (h + 1) & mask){
    uint32 *e = b->phash + 4 * h;
    if(e[2] == 0 || (e[0] == x && e[1] == y))
      return e;
  }
}

static uint32
bits_for(uint32 n)
{
  uint32 bits = 4;

  while((1u << bits) < 2 * n)
    bits++;
  return bits;
}

static int
fail(struct bpe *b, const char *why)
{
  b->err = why;
  bpe_free(b);
  b->err = why;
  return -1;
}

static uint32
get32(const uchar *p)
{
  return p[0] | p[1] << 8 | p[2] << 16 | (uint32)p[3] << 24;
}

// Reads the vocabulary file at path and builds the tables. 0, or -1 with
// b->err saying why (nothing stays allocated).
int
bpe_load(struct bpe *b, const char *path)
{
  uchar hdr[4 * HDRWORDS];
  uint32 h[HDRWORDS];
  int fd;

  memset(b, 0, sizeof(*b));
  for(int c = 0; c < 128; c++)
    ascii_class[c] = uc_class(c);
  fd = open(path, O_RDONLY);
  if(fd < 0)
    return fail(b, "cannot open the vocabulary file");
  if(read(fd, hdr, sizeof(hdr)) != sizeof(hdr)){
    close(fd);
    return fail(b, "vocabulary file too short");
  }
  for(int i = 0; i < HDRWORDS; i++)
    h[i] = get32(hdr + 4 * i);
  if(h[0] != MAGIC || h[1] != 1 || (h[2] != BPE_MERGES && h[2] != BPE_RANKS) ||
     h[3] < 256 || h[3] > (1u << 24) || h[4] < h[3] || h[5] > 1024 ||
     h[6] > (1u << 24) || h[7] > (1u << 28)){
    close(fd);
    return fail(b, "not a vocabulary file (bad header)");
  }
  b->kind = h[2];
  b->nvocab = h[3];
  b->nrows = h[4];
  b->nspecial = h[5];
  b->nmerges = h[6];
  uint32 size = b->nvocab + h[7] + 4 * b->nspecial + 8 * b->nmerges;
  b->file = malloc(size);
  if(b->file == 0){
    close(fd);
    return fail(b, "out of memory for the vocabulary");
  }
  uint32 got = 0;
  while(got < size){
    int n = read(fd, b->file + got, size - got > 65536 ? 65536 : size - got);
    if(n <= 0)
      break;
    got += n;
  }
  close(fd);
  if(got != size)
    return fail(b, "vocabulary file truncated");
  b->lens = b->file;
  b->strs = b->file + b->nvocab;
  const uchar *sp = b->strs + h[7];
  const uchar *mp = sp + 4 * b->nspecial;

  b->off = malloc(4 * (b->nvocab + 1));
  b->tbits = bits_for(b->nvocab);
  b->thash = malloc(4u << b->tbits);
  b->specials = malloc(4 * b->nspecial + 4);
  if(b->off == 0 || b->thash == 0 || b->specials == 0)
    return fail(b, "out of memory for the vocabulary tables");
  uint32 o = 0;
  for(uint32 i = 0; i < b->nvocab; i++){
    b->off[i] = o;
    o += b->lens[i];
  }
  b->off[b->nvocab] = o;
  if(o != h[7])
    return fail(b, "vocabulary lengths do not add up");
  memset(b->thash, 0, 4u << b->tbits);
  uint32 mask = (1u << b->tbits) - 1;
  for(uint32 i = 0; i < b->nvocab; i++){
    if(b->lens[i] == 0 || bpe_lookup(b, b->strs + b->off[i], b->lens[i]) >= 0)
      continue;               // no text, or a duplicate: the first id wins
    uint32 k = hash_bytes(b->strs + b->off[i], b->lens[i]) & mask;
    while(b->thash[k])
      k = (k + 1) & mask;
    b->thash[k] = i + 1;
  }
  // SmolLM2 lacks a few bytes (e.g. 0x04, 0xF5..0xFF): HF's BPE, having no
  // unknown token, drops them; tiktoken's ranks have all 256
  for(int c = 0; c < 256; c++){
    uchar ch = c;
    int id = bpe_lookup(b, &ch, 1);
    if(id < 0 && b->kind == BPE_RANKS)
      return fail(b, "vocabulary lacks a single-byte token");
    b->byteid[c] = id < 0 ? NOPE : (uint32)id;
  }
  // specials, longest first: the longest match at a place wins
  for(uint32 i = 0; i < b->nspecial; i++){
    uint32 id = get32(sp + 4 * i), j = i;
    if(id >= b->nvocab || b->lens[id] == 0)
      return fail(b, "bad special token id");
    while(j > 0 && b->lens[b->specials[j - 1]] < b->lens[id]){
      b->specials[j] = b->specials[j - 1];
      j--;
    }
    b->specials[j] = id;
    b->special1[b->strs[b->off[id]]] = 1;
  }
  if(b->kind == BPE_MERGES){
    b->pbits = bits_for(b->nmerges);
    b->phash = malloc(16u << b->pbits);
    if(b->phash == 0)
      return fail(b, "out of memory for the merge table");
    memset(b->phash, 0, 16u << b->pbits);
    for(uint32 r = 0; r < b->nmerges; r++){
      uchar both[2 * 255];
      uint32 x = get32(mp + 8 * r), y = get32(mp + 8 * r + 4);
      if(x >= b->nvocab || y >= b->nvocab)
        return fail(b, "bad merge");
      memmove(both, b->strs + b->off[x], b->lens[x]);
      memmove(both + b->lens[x], b->strs + b->off[y], b->lens[y]);
      int id = bpe_lookup(b, both, b->lens[x] + b->lens[y]);
      if(id < 0)
        return fail(b, "a merge makes no token");
      uint32 *e = pair_slot(b, x, y);
      if(e[2])
        continue;             // listed twice: the first rank counts
      e[0] = x;
      e[1] = y;
      e[2] = r + 1;
      e[3] = id;
    }
  }
  return 0;
}

void
bpe_free(struct bpe *b)
{
  free(b->file);
  free(b->off);
  free(b->thash);
  free(b->specials);
  free(b->phash);
  memset(b, 0, sizeof(*b));
}

// ------------------------------------------------------------------ BPE

static int encode_raw(struct bpe *b, const uchar *text, int len, uint32 *ids,
                      int cap);

// output ids, with the room left
struct out {
  uint32 *ids;
  int n, cap;
};

static int
emit(struct out *o, uint32 id)
{
  if(o->n >= o->cap)
    return -1;
  o->ids[o->n++] = id;
  return 0;
}

// rank of merging parts k and k+1 of a piece (pos: part boundaries)
static uint32
rank_of(struct bpe *b, const uchar *p, int *pos, uint32 *pid, int m, int k)
{
  if(k < 0 || k + 1 >= m)
    return NOPE;
  if(b->kind == BPE_MERGES)
    return pair_slot(b, pid[k], pid[k + 1])[2] - 1;   // 0 - 1 is NOPE
  int id = bpe_lookup(b, p + pos[k], pos[k + 2] - pos[k]);
  return id < 0 ? NOPE : (uint32)id;
}

// One pre-tokenized piece p[0..n) through BPE.
static int
piece(struct bpe *b, const uchar *p, int n, struct out *o)
{
  static int *pos;
  static uint32 *pid, *rank;
  static int room;
  int m = n;

  if(n == 0)
    return 0;
  if(b->kind == BPE_RANKS){
    int id = bpe_lookup(b, p, n);
    if(id >= 0)
      return emit(o, id);
  }
  if(n == 1 && b->byteid[p[0]] != NOPE)
    return emit(o, b->byteid[p[0]]);
  if(n + 1 > room){       // scratch for the longest piece so far
    free(pos);
    free(pid);
    free(rank);
    room = n + 64;
    pos = malloc(sizeof(int) * room);
    pid = malloc(sizeof(uint32) * room);
    rank = malloc(sizeof(uint32) * room);
    if(pos == 0 || pid == 0 || rank == 0){
      room = 0;
      return -1;
    }
  }
  m = 0;
  for(int i = 0; i < n; i++){
    pos[m] = i;
    pid[m] = b->byteid[p[i]];
    if(pid[m] != NOPE)        // a byte without a token is dropped (see bpe_load)
      m++;
  }
  pos[m] = n;
  for(int k = 0; k < m - 1; k++)
    rank[k] = rank_of(b, p, pos, pid, m, k);
  for(;;){
    int best = -1;
    uint32 r = NOPE;
    for(int k = 0; k < m - 1; k++)
      if(rank[k] < r){
        r = rank[k];
        best = k;
      }
    if(best < 0)
      break;
    pid[best] = b->kind == BPE_RANKS ? r
                : pair_slot(b, pid[best], pid[best + 1])[3];
    memmove(pos + best + 1, pos + best + 2, sizeof(int) * (m - best - 1));
    memmove(pid + best + 1, pid + best + 2, sizeof(uint32) * (m - best - 2));
    memmove(rank + best + 1, rank + best + 2, sizeof(uint32) * (m - best - 3 > 0 ? m - best - 3 : 0));
    m--;
    rank[best] = rank_of(b, p, pos, pid, m, best);
    if(best > 0)
      rank[best - 1] = rank_of(b, p, pos, pid, m, best - 1);
  }
  for(int k = 0; k < m; k++)
    if(emit(o, pid[k]) < 0)
      return -1;
  return 0;
}

// ------------------------------------------------------------------ pre-tokenizers

#define M_L  (1 << UC_LETTER)
#define M_LM (1 << UC_LETTER | 1 << UC_MARK)

// a contraction 's 't 're 've 'm 'll 'd at s[i] (fold: any case, as
// Qwen's (?i:...)); returns its end, or -1
static int
contraction(const uchar *s, int i, int n, int fold)
{
  if(s[i] != '\'' || i + 1 >= n)
    return -1;
  uchar c = s[i + 1], d = i + 2 < n ? s[i + 2] : 0;
  if(fold){
    if(c >= 'A' && c <= 'Z')
      c += 'a' - 'A';
    if(d >= 'A' && d <= 'Z')
      d += 'a' - 'A';
    if(c == 0xc5 && d == 0xbf)  // U+017F LATIN SMALL LETTER LONG S folds to s
      return i + 3;
  }
  if(c == 's' || c == 't' || c == 'm' || c == 'd')
    return i + 2;
  if((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l'))
    return i + 3;
  return -1;
}

// The white-space tail of both regexes, `\s+(?!\S)|\s+` (Qwen's adds
// `\s*[\r\n]+` before it, when nl): the run up to its last newline; else
// all of it at the end of the text; else all but its last char, which then
// starts the next piece, unless that leaves nothing.
static int
spaces(const uchar *s, int i, int n, int nl)
{
  int last = i, lastnl = -1, len, j = i;

  while(j < n && cls(s, j, n, &len) == UC_SPACE){
    if(s[j] == '\r' || s[j] == '\n')
      lastnl = j;
    last = j;
    j += len;
  }
  if(nl && lastnl >= 0)
    return lastnl + 1;
  if(j < n && last > i)
    return last;
  return j;
}

// GPT-2's: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+
//          |\s+(?!\S)|\s+           (one match from i; returns its end)
static int
gpt2_match(const uchar *s, int i, int n)
{
  int len, e = contraction(s, i, n, 0);
  if(e >= 0)
    return e;
  int j = s[i] == ' ' ? i + 1 : i;     // the optional leading space
  int c = cls(s, j, n, &len);
  if(c == UC_LETTER)
    return run(s, j, n, M_L);
  if(c == UC_NUMBER)
    return run(s, j, n, 1 << UC_NUMBER);
  if(c == UC_OTHER || c == UC_MARK)
    return run(s, j, n, 1 << UC_OTHER | 1 << UC_MARK);
  return spaces(s, i, n, 0);
}

// Qwen3.5's: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+
//   |\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
static int
qwen_match(const uchar *s, int i, int n)
{
  int l0, l1, e = contraction(s, i, n, 1);
  if(e >= 0)
    return e;
  int c0 = cls(s, i, n, &l0);
  if(c0 != UC_LETTER && c0 != UC_NUMBER && s[i] != '\r' && s[i] != '\n'){
    int c1 = cls(s, i + l0, n, &l1);
    if(c1 == UC_LETTER || c1 == UC_MARK)
      return run(s, i + l0, n, M_LM);
  }
  if(c0 == UC_LETTER || c0 == UC_MARK)
    return run(s, i, n, M_LM);
  if(c0 == UC_NUMBER)
    return i + l0;
  int j = -1;
  if(s[i] == ' ' && cls(s, i + 1, n, &l1) == UC_OTHER)
    j = i + 1;
  else if(c0 == UC_OTHER)
    j = i;
  if(j >= 0){
    j = run(s, j, n, 1 << UC_OTHER);
    while(j < n && (s[j] == '\r' || s[j] == '\n'))
      j++;
    return j;
  }
  return spaces(s, i, n, 1);
}

// One stretch of text without special tokens: pre-tokenize, BPE each piece.
static int
segment(struct bpe *b, const uchar *s, int n, struct out *o)
{
  int i = 0;

  if(b->kind == BPE_RANKS){
    while(i < n){
      int e = qwen_match(s, i, n);
      if(piece(b, s + i, e - i, o) < 0)
        return -1;
      i = e;
    }
    return 0;
  }
  // SmolLM2: every digit (\p{N} char) alone first, then GPT-2's regex on
  // what lies between
  while(i < n){
    int len, j = i;
    while(j < n && cls(s, j, n, &len) != UC_NUMBER)
      j += len;
    for(int k = i; k < j;){
      int e = gpt2_match(s + i, k - i, j - i) + i;
      if(piece(b, s + k, e - k, o) < 0)
        return -1;
      k = e;
    }
    if(j < n){
      cls(s, j, n, &len);
      if(piece(b, s + j, len, o) < 0)
        return -1;
      j += len;
    }
    i = j;
  }
  return 0;
}

// the special token starting at s (longest), -1 if none
static int
special_at(struct bpe *b, const uchar *s, int n)
{
  if(!b->special1[s[0]])
    return -1;
  for(uint32 i = 0; i < b->nspecial; i++){
    uint32 id = b->specials[i];
    int len = b->lens[id];
    if(len <= n && memcmp(s, b->strs + b->off[id], len) == 0)
      return id;
  }
  return -1;
}

// Text -> ids, after NFC for Qwen3.5 (its tokenizer's normaliser; the
// specials are found in the normalised text, as there). Returns the count,
// or -1 when more than cap ids are needed or memory runs out.
int
bpe_encode(struct bpe *b, const uchar *text, int len, uint32 *ids, int cap)
{
  if(b->kind == BPE_RANKS){
    uchar *norm;
    int n = nfc(text, len, &norm);
    if(n < 0)
      return -1;
    int k = encode_raw(b, norm, n, ids, cap);
    free(norm);
    return k;
  }
  return encode_raw(b, text, len, ids, cap);
}

// bpe_encode without normalisation
static int
encode_raw(struct bpe *b, const uchar *text, int len, uint32 *ids, int cap)
{
  struct out o = { ids, 0, cap };
  int seg = 0, i = 0;

  while(i < len){
    int sp = special_at(b, text + i, len - i);
    if(sp < 0){
      i++;
      continue;
    }
    if(segment(b, text + seg, i - seg, &o) < 0 || emit(&o, sp) < 0)
      return -1;
    i += b->lens[sp];
    seg = i;
  }
  if(segment(b, text + seg, len - seg, &o) < 0)
    return -1;
  return o.n;
}

// Ids -> their raw bytes (not NUL-terminated). Returns the byte count, or
// -1 for an id outside the model's rows or when cap is too small.
int
bpe_decode(struct bpe *b, const uint32 *ids, int n, uchar *out, int cap)
{
  int k = 0;

  for(int i = 0; i < n; i++){
    if(ids[i] >= b->nrows)
      return -1;
    if(ids[i] >= b->nvocab)
      continue;               // padding row: no text
    int len = b->lens[ids[i]];
    if(k + len > cap)
      return -1;
    memcpy(out + k, b->strs + b->off[ids[i]], len);
    k += len;
  }
  return k;
}
