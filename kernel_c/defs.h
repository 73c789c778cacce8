// defs.h: the kernel's index: every function one file offers the others,
// by file.

struct ai_cache;
struct buf;
struct context;
struct file;
struct inode;
struct pipe;
struct proc;
struct spinlock;
struct sleeplock;
struct stat;
struct superblock;
struct bootinfo;
struct aislot;
struct ai_submit_args;
struct ai_dev_resp;
struct virtio_ai_config;

// ai_service.c
extern struct spinlock ai_lock;
void            ai_service_init(void);
int             ai_service_submit(struct ai_submit_args*);
int             ai_service_wait(int, uint64, int);
int             ai_service_query(int, uint64);
int             ai_service_read(int, uint64, int, int, int);
int             ai_service_call(struct ai_submit_args*, uint64, int);
int             ai_service_worker_register(void);
int             ai_service_worker_get(uint64, int, uint64);
int             ai_service_worker_run(int);
int             ai_service_worker_complete(int, uint64, int, int);
int             ai_service_info(uint64);
int             ai_service_stats(uint64);
void            ai_model_changed(void);
void            ai_chain_done(int);
void            ai_chain_freed(void);
void            ai_progress(int);

// bio.c
void            binit(void);
struct buf*     bread(uint, uint);
void            brelse(struct buf*);
void            bwrite(struct buf*);
void            bpin(struct buf*);
void            bunpin(struct buf*);

// console.c
void            consoleinit(void);
void            consoleintr(int);
void            consputc(int);

// exec.c
int             kexec(char*, char**);

// file.c
struct file*    filealloc(void);
void            fileclose(struct file*);
struct file*    filedup(struct file*);
void            fileinit(void);
int             fileread(struct file*, uint64, int n);
int             filestat(struct file*, uint64 addr);
int             filewrite(struct file*, uint64, int n);

// fs.c
int             fsinit(int);
int             dirlink(struct inode*, char*, uint);
struct inode*   dirlookup(struct inode*, char*, uint*);
struct inode*   ialloc(uint, short);
struct inode*   idup(struct inode*);
void            iinit(void);
void            ilock(struct inode*);
void            iput(struct inode*);
void            iunlock(struct inode*);
void            iunlockput(struct inode*);
void            iupdate(struct inode*);
void            itrunc(struct inode*);
struct inode*   namei(char*);
struct inode*   nameiparent(char*, char*);
int             readi(struct inode*, int, uint64, uint, uint);
void            stati(struct inode*, struct stat*);
int             writei(struct inode*, int, uint64, uint, uint);

// log.c
int             initlog(int, struct superblock*);
void            log_write(struct buf*);
void            begin_op(void);
void            end_op(void);

// path.c
int             namecmp(const char*, const char*);
char*           skipelem(char*, char*);

// kalloc.c
void*           kalloc(void);
void            kfree(void *);
void            kshare(void *);
int             kunshare(void *);
void            kinit(void);
uint64          kfreepages(void);
uint64          ktotalpages(void);

// main.c
extern struct bootinfo bootinfo;
extern uint64   phystop;
void            start_init(void);
void            mainhart(uint64 hartid);

// icache.c
void            icache_code_freed(uint64 pa);
void            icache_sync(void);

// tlb.c
void            tlb_unmapped(void);
void            tlb_enter(uint64 satp);

// ipi.c
void            ipi_send(int hart, uint why);
void            ipi_intr(void);
void            ipi_wake_idle(int n);
void            ipi_flush(void);

// pipe.c
int             pipealloc(struct file**, struct file**);
void            pipeclose(struct pipe*, int);
int             piperead(struct pipe*, uint64, int);
int             pipewrite(struct pipe*, uint64, int);

// plic.c
void            plicinit(void);
void            plicinithart(void);
int             plic_claim(void);
void            plic_complete(int);

// power.c
void            poweroff(int kind, int status) __attribute__((noreturn));

// printf.c
int             printf(const char*, ...) __attribute__((format(printf, 1, 2)));
void            panic(const char*, ...) __attribute__((noreturn))
                                       __attribute__((format(printf, 1, 2)));
void            printfinit(void);
extern volatile int panicking;

// proc.c
int             cpuid(void);
void            exit(int) __attribute__((noreturn));
void            exithook_register(void (*)(struct proc*));
int             fork(void);
int             growproc(int);
void            proc_mapstacks(pagetable_t);
pagetable_t     proc_pagetable(struct proc *);
void            proc_freepagetable(pagetable_t, uint64);
int             kill(int);
void            killintr(void);
int             killed(struct proc*);
void            setkilled(struct proc*);
struct proc*    myproc(void);
void            procinit(void);
void            scheduler(void) __attribute__((noreturn));
void            sched(void);
void            sleep(void*, struct spinlock*);
void            userinit(void);
int             wait(uint64);
void            wakeup(void*);
int             wakeone(void*);
void            yield(void);
int             either_copyout(int user_dst, uint64 dst, void *src, uint64 len);
int             either_copyin(void *dst, int user_src, uint64 src, uint64 len);
void            procdump(void);
int             procinfo(uint64 addr, int n);

// swtch.S
void            swtch(struct context*, struct context*);

// spinlock.c
void            acquire(struct spinlock*);
int             holding(struct spinlock*);
void            initlock(struct spinlock*, char*);
void            release(struct spinlock*);
void            push_off(void);
void            pop_off(void);

// sleeplock.c
void            acquiresleep(struct sleeplock*);
void            releasesleep(struct sleeplock*);
int             holdingsleep(struct sleeplock*);
void            initsleeplock(struct sleeplock*, char*);

// string.c
int             memcmp(const void*, const void*, uint);
void*           memmove(void*, const void*, uint);
void*           memset(void*, int, uint);
char*           safestrcpy(char*, const char*, int);
int             strlen(const char*);
int             strncmp(const char*, const char*, uint);
char*           strncpy(char*, const char*, int);

// syscall.c
void            argint(int, int*);
int             argstr(int, char*, int);
void            argaddr(int, uint64 *);
int             argptr(int, uint64 *, uint64 size, int align, int write);
int             fetchstr(uint64, char*, int);
int             fetchaddr(uint64, uint64*);
void            syscall(void);

// timer.c
extern struct spinlock tickslock;
extern uint     ticks;
void            timerinit(void);
void            timerinithart(void);
void            timerintr(void);
void            timer_arm(void);
void            timer_idle(void);
uint64          boottime(void);
uint64          time_us(void);
int             ticksleep(int);
int             timer_wake_at(uint, void*);
void            timer_wake_cancel(int);
uint            uptime(void);

// trap.c
void            trapinit(void);
void            trapinithart(void);
void            usertrapret(void);
int             devintr(uint64 scause);
void            irq_register(int irq, void (*fn)(void));
char*           causename(uint64 scause);

// uart.c
void            uartinit(void);
void            uartintr(void);
void            uartputc_sync(int);
int             uartgetc(void);

// virtio_disk.c
void            virtio_disk_init(void);
void            virtio_disk_rw(struct buf *, int);
uint64          virtio_disk_blocks(void);
void            virtio_disk_flush(void);

// virtio_ai.c
void            virtio_ai_init(void);
int             virtio_ai_present(void);
int             virtio_ai_sampling(void);
struct virtio_ai_config* virtio_ai_model(int refresh);
void            virtio_ai_cache(struct ai_cache*);
void            virtio_ai_trace(int event, int id);
void            virtio_ai_want_progress(int delta);
int             virtio_ai_start(struct aislot*, int slot);
void            virtio_ai_cancel(int);
int             virtio_ai_busy(int);
struct ai_dev_resp* virtio_ai_resp(int);
uint32*         virtio_ai_out(int);
void            virtio_ai_progress(int, int*, uint64*, uint64*);
void            virtio_ai_release(int);
void            virtio_ai_abandon(int);

// vm.c
extern pagetable_t kernel_pagetable;
void            kvminit(void);
void            kvminithart(void);
void            kvmmap(pagetable_t, uint64, uint64, uint64, int);
int             mappages(pagetable_t, uint64, uint64, uint64, int);
pagetable_t     uvmcreate(void);
uint64          uvmalloc(pagetable_t, uint64, uint64, int);
uint64          uvmdealloc(pagetable_t, uint64, uint64);
int             uvmcopy(pagetable_t, pagetable_t, uint64);
void            uvmfree(pagetable_t, uint64);
void            uvmunmap(pagetable_t, uint64, uint64, int);
void            uvmclear(pagetable_t, uint64);
int             uvmlazy(pagetable_t, uint64, uint64, int);
int             uvmfault(pagetable_t, uint64);
void            uvmaddperm(pagetable_t, uint64, int);
int             uvmcheck(pagetable_t, uint64, uint64, int);
pte_t *         walk(pagetable_t, uint64, int);
uint64          walkaddr(pagetable_t, uint64);
int             copyout(pagetable_t, uint64, char *, uint64);
int             copyin(pagetable_t, char *, uint64, uint64);
int             copyinstr(pagetable_t, char *, uint64, uint64);

// number of elements in a fixed-size array
#define NELEM(x) (sizeof(x)/sizeof((x)[0]))
