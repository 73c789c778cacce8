// llmrun: the course's LLM runner (token ids in, generated token ids out),
// as a client of the kernel AI service. Installed as /llmrun, /llmrun_smol
// and /llmrun_qwen; the last two insist on their model family, like the
// course binaries. The model itself is loaded once by the AI device (chosen
// on the host: `harness run --model smol|qwen|PATH`) and served by
// ai_daemon, so llmrun computes nothing: it validates, calls ai_submit and
// ai_wait, and prints.
//
//   llmrun [--asset-dir DIR] [--predict N] [--timing] token0 token1 ...
//   llmrun [--asset-dir DIR] [--predict N] [--timing] --prompt-file FILE
//   llmrun [--asset-dir DIR] [--timing] --stdin      (also: no ids at all)
//   llmrun [--asset-dir DIR] [--predict N] [--timing] --text TEXT
//   --stream (with any of them): print each id (with --text: its text) as
//   the device produces it
//   --stop-eos (with any of them): stop early at the model's end-of-sequence
//   token (AI_STOP_EOS), as a chat answer ends its turn; without it exactly
//   N tokens, as the course's runner
//   --speculate K (with any of them): a decode step verifies at most K drafted
//   tokens (speculative decoding, 1..AI_MAX_SPECULATE); 0 turns it off
//   (AI_NO_SPEC). Without it the device's default: on, because the ids are
//   the same as without (greedy) and the draft length adapts, so a request
//   where nothing is accepted stops drafting (docs/BENCH.md, "speculate")
//
// Run once: one stdout line with the generated ids ("123 456 789 42").
// With --stream the line is the same, but it grows id by id while the
// request runs (ai_read), instead of appearing whole at the end (ai_wait).
// --stdin: one request per input line, "<predict> <token0> <token1> ...",
// one result line each; `exit`, `quit` or end of input leaves.
// --text: the prompt is text, encoded by the guest tokenizer (bpe.c, over
// the model's /AI/.../VOCAB.TOK), and the result line is the generated text
// (special tokens such as <|im_start|> in TEXT become their ids).
// Messages go to fd 2 as "[PROG] ..." (log) and "PROG: ..." (error), PROG
// being the program's name, with the course's texts.
//
// --timing adds these stdout lines after each result (stable format; the
// harness parses the `timing:` line):
//   Model Loading Time: <us> us        the device's load_us (ai_info)
//     of which the one-time int8 repack: <us> us ...   when load_us includes it
//   TTFT: <us> us                      t_first - t_submit
//   TPOT: <us> us                      (t_done - t_first) / (generated - 1),
//                                      or "TPOT: n/a (1 token)"
//   E2E: <us> us                       time_us() after ai_wait - t_submit
//   Prefix cache: <n> of <m> prompt tokens   (the device's prefix cache)
//   Tokens per step: <x.xx> (<s> decode steps after the first token)
//   timing: model="NAME" synthetic=0|1 load_us=.. ttft_us=.. tpot_us=..|-1
//     e2e_us=.. prompt=N generated=N submit=.. dispatch=.. accept=.. first=..
//     done=.. waited=.. cached=N repack_us=.. shown=.. reqid=N tokenize=..
//     tokenized=.. decoded=.. detok_us=.. steps=N (one line; the stamps are raw guest
//                                      times in us since boot, 0 = not taken:
//                                      shown, the first id / character was
//                                      written (--stream); tokenize..tokenized
//                                      the prompt was encoded, decoded the
//                                      result text was written (--text);
//                                      detok_us the time spent decoding)
// With --text or --stream, before the timing: line:
//   Tokenize: <us> us                  (--text) encoding the prompt
//   Detokenize: <us> us                (--text) decoding the result
//   First on console: <us> us          (--stream) t_submit -> the first id or
//                                      character written
//   Time to first character: <us> us   (--stream --text) the encoding began ->
//                                      the first character written
// and, for synthetic weights, a line starting "note: synthetic weights".
// All stamps are guest microseconds since boot (the clock of time_us()):
// t_submit when ai_submit entered the kernel, t_dispatch when a worker took
// it, t_accept / t_first / t_done when the device accepted it, produced the
// first token and finished (docs/ARCHITECTURE.md, "AI timings").

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "virtio_ai.h"
#include "user.h"
#include "bpe.h"
#include "tokmodel.h"

#define LINE_MAX  4096    // --stdin request line (the course's)
#define SERVICE_FORMAT "<predict> <token0> <token1> ..."

static char *prog;                // basename of argv[0]
static const char *want;          // required family ("SmolLM"), 0 = any
static int timing;                // --timing
static int stream;                // --stream
static int stop_eos;              // --stop-eos
static int speculate = -1;        // --speculate K: -1 = the device's default
static struct ai_info info;
static struct bpe *textbpe;       // --text: results are decoded with it
static uint64 t_tokenize, t_tokenized, t_decoded, detok_us;  // --text stages

static void
say(const char *prefix, const char *suffix, const char *fmt, va_list ap)
{
  char msg[512];

  vsnprintf(msg, sizeof(msg), fmt, ap);
  fprintf(2, "%s%s%s%s\n", prefix, prog, suffix, msg);
}

// "[PROG] message" on fd 2 (the course's LLM_LOG)
static void
logmsg(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  say("[", "] ", fmt, ap);
  va_end(ap);
}

// "PROG: message" on fd 2 (the course's LLM_ERR)
static void
errmsg(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  say("", ": ", fmt, ap);
  va_end(ap);
}

static void
usage(void)
{
  fprintf(2,
    "usage: %s [--asset-dir DIR] [--predict N] token0 token1 ...\n"
    "       %s [--asset-dir DIR] [--predict N] --prompt-file FILE\n"
    "       %s [--asset-dir DIR] --stdin\n"
    "prompt file format: whitespace-separated token ids\n"
    "stdin service format: " SERVICE_FORMAT "\n"
    "interactive mode: type exit or quit to return to the shell\n"
    "       %s [--asset-dir DIR] [--predict N] --text TEXT\n"
    "--text: TEXT is encoded by the guest tokenizer, the result is text\n"
    "--timing: after each result print Model Loading Time, TTFT, TPOT and\n"
    "  E2E in microseconds (see the program's header for the format)\n"
    "--stream: print each id as it is generated (same line as without)\n"
    "--stop-eos: stop at the model's end-of-sequence token (up to N)\n"
    "--speculate K: verify at most K drafted tokens a step (0: off;\n"
    "  default: the device's, on)\n"
    "the model is the AI device's (harness run --model smol|qwen|PATH);\n"
    "  --asset-dir is accepted for the course's command lines\n",
    prog, prog, prog, prog);
}

// ------------------------------------------------------------------ model

// Waits for the device's model and checks it is the family this program
// name asks for. Exits on failure.
static void
model_check(const char *asset_dir)
{
  int said = 0;

  for(;;){
    if(ai_info(&info) < 0 || !info.present){
      errmsg("no AI device (boot with: harness run --model smol)");
      exit(1);
    }
    if(info.state == AI_DEV_READY)
      break;
    if(info.state != AI_DEV_LOADING){
      errmsg(info.state == AI_DEV_FAILED ? "the AI device failed to load "
             "its model" : "no model loaded (boot with: harness run --model "
             "smol)");
      exit(1);
    }
    if(!said++)
      logmsg("waiting for the AI device to load its model");
    sleep(2);
  }
  const char *got = ai_family(info.arch);
  if(want && strcmp(want, got) != 0){
    errmsg("expected %s assets, got %s", want, got);
    exit(1);
  }
  if(asset_dir){
    // the course chose the model by directory; here the host does
    const char *base = strrchr(asset_dir, '/') ? strrchr(asset_dir, '/') + 1
                                               : asset_dir;
    const char *dirfam = "unknown-model";
    if(strcmp(base, "SMOL") == 0 || strcmp(base, "smol") == 0)
      dirfam = "SmolLM";
    else if(strcmp(base, "QWEN") == 0 || strcmp(base, "qwen") == 0)
      dirfam = "Qwen3.5";
    if(strcmp(dirfam, got) != 0)
      logmsg("--asset-dir %s ignored: the AI device serves %s (%s); the "
             "model is chosen on the host (harness run --model ...)",
             asset_dir, info.name, got);
  }
  if(info.workers == 0)
    logmsg("no ai_daemon worker is registered: requests wait in the queue "
           "until one starts");
}

// ------------------------------------------------------------------ requests

static void
print_timing(struct ai_status *st, uint64 waited, uint64 shown, int nprompt)
{
  uint64 ttft = st->t_first - st->t_submit;
  uint64 e2e = waited - st->t_submit;
  long tpot = -1;
  int n = st->ngenerated;

  if(n > 1)
    tpot = (st->t_done - st->t_first) / (n - 1);
  printf("Model Loading Time: %lu us\n", info.load_us);
  if(info.repack_us)
    printf("  of which the one-time int8 repack: %lu us (cached: later loads skip it)\n",
           info.repack_us);
  printf("TTFT: %lu us\n", ttft);
  if(tpot >= 0)
    printf("TPOT: %ld us\n", tpot);
  else
    printf("TPOT: n/a (1 token)\n");
  printf("E2E: %lu us\n", e2e);
  printf("Prefix cache: %d of %d prompt tokens\n", st->ncached, nprompt);
  if(st->nsteps > 0){
    int per100 = (n - 1) * 100 / st->nsteps;
    printf("Tokens per step: %d.%d%d (%d decode steps after the first token)\n",
           per100 / 100, per100 / 10 % 10, per100 % 10, st->nsteps);
  }
  if(textbpe){
    printf("Tokenize: %lu us\n", t_tokenized - t_tokenize);
    printf("Detokenize: %lu us\n", detok_us);
  }
  if(shown){
    printf("First on console: %lu us\n", shown - st->t_submit);
    if(textbpe)
      printf("Time to first character: %lu us\n", shown - t_tokenize);
  }
  printf("timing: model=\"%s\" synthetic=%d load_us=%lu ttft_us=%lu tpot_us=%ld "
         "e2e_us=%lu prompt=%d generated=%d submit=%lu dispatch=%lu "
         "accept=%lu first=%lu done=%lu waited=%lu cached=%d repack_us=%lu "
         "shown=%lu reqid=%d "
         "tokenize=%lu tokenized=%lu decoded=%lu detok_us=%lu steps=%d\n",
         info.name, (info.flags & AI_CFG_SYNTHETIC) != 0, info.load_us, ttft,
         tpot, e2e, nprompt, n, st->t_submit, st->t_dispatch, st->t_accept,
         st->t_first, st->t_done, waited, st->ncached, info.repack_us, shown,
         st->reqid,
         t_tokenize, t_tokenized, t_decoded, detok_us, st->nsteps);
  if(info.flags & AI_CFG_SYNTHETIC)
    printf("note: synthetic weights (%s): the ids are not meaningful, the "
           "timings are real\n", info.name);
}

// One result line: the generated ids as the service gave them, or with
// --text their text.
static void
print_result(char *out, int predict)
{
  struct ai_idparser p;
  uint32 *ids;
  int n;

  if(textbpe == 0 || (ids = malloc(4 * predict)) == 0){
    printf("%s\n", out);
    return;
  }
  ai_ids_init(&p, ids, predict);
  ai_ids_feed(&p, out, strlen(out));
  n = ai_ids_end(&p);
  uint64 t0 = time_us();
  if(n < 0 || tok_write_text(textbpe, 1, ids, n) < 0)
    errmsg("cannot decode the result %s", out);
  printf("\n");
  t_decoded = time_us();
  detok_us += t_decoded - t0;
  free(ids);
}

// --text: the prompt's ids from the guest tokenizer. Exits on failure.
static int
text_prompt(const char *text, uint32 *ids)
{
  static struct bpe b;
  int len = strlen(text);
  uint32 *all;

  if(tok_load(&b, 0, prog) < 0)
    exit(1);
  textbpe = &b;
  all = malloc(4 * (len + 1));
  if(all == 0){
    errmsg("out of memory for the prompt's tokens");
    exit(1);
  }
  t_tokenize = time_us();
  int n = bpe_encode(&b, (const uchar *)text, len, all, len + 1);
  t_tokenized = time_us();
  if(n < 1 || n > AI_MAX_TOKENS){
    errmsg("--text is %d tokens; the service takes 1..%d", n < 0 ? len : n,
           AI_MAX_TOKENS);
    exit(1);
  }
  memmove(ids, all, 4 * n);
  free(all);
  return n;
}

// --stream: print request reqid's ids (with --text their text) as the
// device produces them, one line like the whole result. Returns the guest
// time at which the first id or character went to the console, 0 if none
// did.
static uint64
stream_ids(int reqid)
{
  uint32 buf[64];
  uint64 shown = 0;
  int n = 0, k, i;
  char line[64 * 11];
  int len;

  while((k = ai_read(reqid, buf, n, 64, -1)) > 0){
    if(textbpe){
      uint64 t0 = time_us();
      if(tok_write_text(textbpe, 1, buf, k) < 0)
        errmsg("cannot decode an id of request %d", reqid);
      t_decoded = time_us();
      detok_us += t_decoded - t0;
      if(!shown)
        shown = t_decoded;
      n += k;
      continue;
    }
    len = 0;
    for(i = 0; i < k; i++)
      len += snprintf(line + len, sizeof(line) - len, n + i ? " %u" : "%u",
                      buf[i]);
    write(1, line, len);
    if(!shown)
      shown = time_us();
    n += k;
  }
  // the end (or an error, which ai_wait reports)
  write(1, "\n", 1);
  return shown;
}

// The course's per-request checks, with its texts, then one request
// through the service. Prints the result line. Returns 0, or -1 after
// saying why (the caller adds "request failed").
static int
run_request(const uint32 *ids, int n, int predict)
{
  struct ai_status st;
  int reqid, cap, len;
  char *out;

  if(n < 1 || n > AI_MAX_TOKENS){
    errmsg("invalid token count %d", n);
    return -1;
  }
  if(predict <= 0){
    errmsg("predict count must be > 0");
    return -1;
  }
  if(n + predict > info.max_context){
    errmsg("request too long for runtime_seq_len=%d", info.max_context);
    return -1;
  }
  if(predict > AI_MAX_PREDICT){
    errmsg("predict count %d exceeds the service limit %d", predict,
           AI_MAX_PREDICT);
    return -1;
  }
  for(int i = 0; i < n; i++){
    if(ids[i] >= info.vocab_size){
      errmsg("token %d out of range", i);
      return -1;
    }
  }

  cap = predict * 11 + 16;      // "4294967295 " per id
  out = malloc(cap);
  if(out == 0){
    errmsg("out of memory for a %d-byte result", cap);
    return -1;
  }
  struct ai_submit_args a;
  memset(&a, 0, sizeof(a));
  a.tokens = (uint64)ids;
  a.ntokens = n;
  a.npredict = predict;
  a.flags = (stop_eos ? AI_STOP_EOS : 0) | (speculate == 0 ? AI_NO_SPEC : 0);
  a.speculate = speculate > 0 ? speculate : 0;
  reqid = ai_submitx(&a);
  if(reqid < 0){
    errmsg("ai_submit failed: %s", ai_strerror(ai_lasterr()));
    free(out);
    return -1;
  }
  detok_us = t_decoded = 0;
  uint64 shown = stream ? stream_ids(reqid) : 0;
  len = ai_wait_status(reqid, out, cap, &st);
  uint64 waited = time_us();
  if(len < 0){
    errmsg("request %d failed: %s", reqid, ai_strerror(ai_lasterr()));
    free(out);
    return -1;
  }
  if(!stream)
    print_result(out, predict);
  if(timing)
    print_timing(&st, waited, shown, n);
  free(out);
  return 0;
}

// ------------------------------------------------------------------ inputs

// Reads the ids of a prompt file (before the model is touched, like the
// course: a relative path is the shell's cwd). Exits on any error.
static int
load_prompt_file(const char *path, uint32 *ids)
{
  struct ai_idparser p;
  struct stat sb;
  char buf[512];
  int fd, n;

  fd = open(path, O_RDONLY);
  if(fd < 0){
    errmsg("failed to open prompt file %s", path);
    exit(1);
  }
  if(fstat(fd, &sb) < 0 || sb.type != T_FILE){
    errmsg("bad prompt file %s", path);
    exit(1);
  }
  ai_ids_init(&p, ids, AI_MAX_TOKENS);
  while((n = read(fd, buf, sizeof(buf))) > 0)
    if(ai_ids_feed(&p, buf, n) != 0)
      break;
  if(n < 0){
    errmsg("bad prompt file %s", path);
    exit(1);
  }
  close(fd);
  n = ai_ids_end(&p);
  if(n == AI_IDS_TOOMANY)
    errmsg("prompt file %s exceeds token limit %d", path, AI_MAX_TOKENS);
  else if(n == AI_IDS_BADCHAR)
    errmsg("invalid token id in %s near byte %d", path, p.errpos);
  else if(n == AI_IDS_OVERFLOW)
    errmsg("token id overflow in %s near byte %d", path, p.errpos);
  else if(n == 0)
    errmsg("no token ids found in %s", path);
  if(n <= 0)
    exit(1);
  return n;
}

static char *
trim(char *s)
{
  char *e;

  while(*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
    s++;
  e = s + strlen(s);
  while(e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' ||
                  e[-1] == '\n'))
    *--e = 0;
  return s;
}

// Splits a request line "<predict> <ids...>" in place. Returns the number
// of ids, or -1 for a malformed line.
static int
parse_request(char *s, uint32 *predict, uint32 *ids)
{
  int n = -1;

  while(*s){
    char *w = s;
    while(*s && *s != ' ' && *s != '\t')
      s++;
    if(*s)
      *s++ = 0;
    while(*s == ' ' || *s == '\t')
      s++;
    uint32 v;
    if(ai_parse_u32(w, &v) < 0)
      return -1;
    if(n < 0){
      if(v == 0)
        return -1;
      *predict = v;
    } else {
      if(n >= AI_MAX_TOKENS)
        return -1;
      ids[n] = v;
    }
    n++;
  }
  return n >= 1 ? n : -1;
}

// The course's interactive service: one request per line.
static int
stdin_service(void)
{
  static char line[LINE_MAX];
  static uint32 ids[AI_MAX_TOKENS];
  uint32 predict;

  logmsg("stdin service ready; format: " SERVICE_FORMAT "; type exit or quit "
         "to return to sh");
  for(;;){
    gets(line, sizeof(line));
    if(line[0] == 0)
      break;                    // end of input
    int len = strlen(line);
    if(len == sizeof(line) - 1 && line[len - 1] != '\n'){
      // longer than the buffer: drop the rest of the line
      char c;
      while(read(0, &c, 1) == 1 && c != '\n')
        ;
      errmsg("bad request line; expected: " SERVICE_FORMAT);
      continue;
    }
    char *s = trim(line);
    if(*s == 0)
      continue;
    if(strcmp(s, "exit") == 0 || strcmp(s, "quit") == 0){
      logmsg("leaving stdin service");
      break;
    }
    int n = parse_request(s, &predict, ids);
    if(n < 0 || predict > 0x7fffffff){
      errmsg("bad request line; expected: " SERVICE_FORMAT);
      continue;
    }
    if(run_request(ids, n, predict) < 0)
      errmsg("request failed");
  }
  return 0;
}

int
main(int argc, char *argv[])
{
  static uint32 ids[AI_MAX_TOKENS];
  char *asset_dir = 0, *prompt_file = 0, *text = 0;
  int use_stdin = 0, predict = 1, i, n = 0;

  prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  if(strcmp(prog, "llmrun_smol") == 0)
    want = "SmolLM";
  else if(strcmp(prog, "llmrun_qwen") == 0)
    want = "Qwen3.5";

  for(i = 1; i < argc; i++){
    char *a = argv[i];
    if(strcmp(a, "--asset-dir") == 0 || strcmp(a, "--predict") == 0 ||
       strcmp(a, "--prompt-file") == 0 || strcmp(a, "--text") == 0 ||
       strcmp(a, "--speculate") == 0){
      if(i + 1 >= argc){
        usage();
        exit(1);
      }
      char *v = argv[++i];
      if(strcmp(a, "--asset-dir") == 0){
        asset_dir = v;
      } else if(strcmp(a, "--predict") == 0){
        uint32 p;
        if(ai_parse_u32(v, &p) < 0 || p == 0 || p > 0x7fffffff){
          errmsg("bad --predict value %s", v);
          exit(1);
        }
        predict = p;
      } else if(strcmp(a, "--speculate") == 0){
        uint32 k;
        if(ai_parse_u32(v, &k) < 0 || k > AI_MAX_SPECULATE){
          errmsg("bad --speculate value %s (0..%d)", v, AI_MAX_SPECULATE);
          exit(1);
        }
        speculate = k;
      } else if(strcmp(a, "--text") == 0){
        text = v;
      } else {
        prompt_file = v;
      }
    } else if(strcmp(a, "--stdin") == 0){
      use_stdin = 1;
    } else if(strcmp(a, "--timing") == 0){
      timing = 1;
    } else if(strcmp(a, "--stream") == 0){
      stream = 1;
    } else if(strcmp(a, "--stop-eos") == 0){
      stop_eos = 1;
    } else if(strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0){
      usage();
      exit(0);
    } else if(a[0] == '-' && !isdigit(a[1])){
      errmsg("unknown option %s", a);
      usage();
      exit(1);
    } else {
      break;
    }
  }

  if(use_stdin && prompt_file){
    errmsg("--stdin cannot be combined with --prompt-file");
    exit(1);
  }
  if(prompt_file && i < argc){
    errmsg("cannot mix --prompt-file with inline token ids");
    exit(1);
  }
  if(text && (use_stdin || prompt_file || i < argc)){
    errmsg("--text cannot be combined with --stdin, --prompt-file or token ids");
    exit(1);
  }
  if(use_stdin && i < argc){
    errmsg("--stdin cannot be combined with inline token ids");
    exit(1);
  }
  for(; i < argc; i++){
    if(n >= AI_MAX_TOKENS || ai_parse_u32(argv[i], &ids[n]) < 0){
      errmsg("invalid token id %s", argv[i]);
      exit(1);
    }
    n++;
  }
  if(prompt_file)
    n = load_prompt_file(prompt_file, ids);

  model_check(asset_dir);
  if(text)
    n = text_prompt(text, ids);
  if(n == 0)
    return stdin_service();
  if(run_request(ids, n, predict) < 0){
    errmsg("request failed");
    exit(1);
  }
  return 0;
}
