// tokmodel.c: the guest tokenizer for the AI device's model (tok, llmrun
// --text): finds the vocabulary file the harness put next to the model's
// guest files, /AI/SMOL/VOCAB.TOK or /AI/QWEN/VOCAB.TOK, by the model
// family ai_info reports (without an AI device: whichever is there), and
// writes decoded text out.

#include "types.h"
#include "stat.h"
#include "virtio_ai.h"
#include "user.h"
#include "bpe.h"
#include "tokmodel.h"

static const char *paths[] = { TOK_SMOL_VOCAB, TOK_QWEN_VOCAB };

// The vocabulary path for this machine's model; 0 when none can be told.
const char *
tok_vocab_path(void)
{
  struct ai_info info;
  struct stat st;

  if(ai_info(&info) == 0 && info.present && info.state == AI_DEV_READY){
    const char *fam = ai_family(info.arch);
    if(strcmp(fam, "SmolLM") == 0)
      return TOK_SMOL_VOCAB;
    if(strcmp(fam, "Qwen3.5") == 0)
      return TOK_QWEN_VOCAB;
  }
  for(int i = 0; i < 2; i++)
    if(stat(paths[i], &st) == 0)
      return paths[i];
  return 0;
}

// Loads the vocabulary at path (0: tok_vocab_path()). Returns 0, or -1
// after printing "PROG: why" on fd 2.
int
tok_load(struct bpe *b, const char *path, const char *prog)
{
  if(path == 0)
    path = tok_vocab_path();
  if(path == 0){
    fprintf(2, "%s: no vocabulary file (%s or %s; the harness writes it when "
            "booted with --model)\n", prog, TOK_SMOL_VOCAB, TOK_QWEN_VOCAB);
    return -1;
  }
  if(bpe_load(b, path) < 0){
    fprintf(2, "%s: %s: %s\n", prog, path, b->err);
    return -1;
  }
  return 0;
}

// Writes the text of ids to fd. Returns 0, or -1 for an id outside the
// model's vocabulary.
int
tok_write_text(struct bpe *b, int fd, const uint32 *ids, int n)
{
  uchar buf[1024];
  int k = 0;

  for(int i = 0; i < n; i++){
    if(k + 255 > sizeof(buf)){        // an id's text is at most 255 bytes
      if(write(fd, buf, k) != k)
        return -1;
      k = 0;
    }
    int len = bpe_decode(b, ids + i, 1, buf + k, sizeof(buf) - k);
    if(len < 0)
      return -1;
    k += len;
  }
  if(k > 0 && write(fd, buf, k) != k)
    return -1;
  return 0;
}
