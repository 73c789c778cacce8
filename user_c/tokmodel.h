// tokmodel.h: the guest tokenizer for the AI device's model (tokmodel.c).
// Include after types.h, user.h and bpe.h.

#define TOK_SMOL_VOCAB "/AI/SMOL/VOCAB.TOK"
#define TOK_QWEN_VOCAB "/AI/QWEN/VOCAB.TOK"

const char *tok_vocab_path(void);
int tok_load(struct bpe *b, const char *path, const char *prog);
int tok_write_text(struct bpe *b, int fd, const uint32 *ids, int n);
