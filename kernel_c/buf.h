// buf.h: one cached disk block (bio.c).

struct buf {
  int valid;            // data has been read from disk
  int disk;             // owned by the disk driver until it finishes
  uint dev;
  uint blockno;
  struct sleeplock lock;
  uint refcnt;
  struct buf *prev;     // LRU list, most recently used first
  struct buf *next;
  uchar data[BSIZE];
};
