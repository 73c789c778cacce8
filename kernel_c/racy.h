// racy.h: races the kernel means to have, told to the harness's race
// detector (harness race, harness/race/intended.py).
//
// The detector reports two harts' accesses to the same bytes when one is a
// write and no lock is held in common. Some such accesses are intended: a
// flag read in a loop that a later locked check confirms, a counter only
// ever read for statistics. Each is marked here with the reason, which must
// hold for every access it covers:
//
//   DATA_RACE_OK(var, "why")        every access to the global var
//   DATA_RACE_NEXT_LINE("why")      the accesses on the next source line
//
// Each puts a record into a section of its own (kernel.ld keeps them),
// which the harness reads from the ELF; nothing runs in the kernel.

struct data_race_var {
  void *addr;
  unsigned long size;
  const char *why;
};

struct data_race_line {
  const char *file;
  unsigned long line;
  const char *why;
};

#define DATA_RACE_CAT2(a, b) a##b
#define DATA_RACE_CAT(a, b) DATA_RACE_CAT2(a, b)

#define DATA_RACE_OK(var, reason) \
  static const struct data_race_var DATA_RACE_CAT(data_race_var_, __LINE__) \
    __attribute__((used, section(".data_race_var"))) = { (void *)&(var), sizeof(var), reason }

#define DATA_RACE_NEXT_LINE(reason) \
  static const struct data_race_line DATA_RACE_CAT(data_race_line_, __LINE__) \
    __attribute__((used, section(".data_race_line"))) = { __FILE__, __LINE__ + 1, reason }
