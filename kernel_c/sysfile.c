// sysfile.c: file-system system calls. They check their arguments and
// call into file.c and fs.c. Each one that may write the disk runs as one
// log operation, begin_op() .. end_op() (log.c), so it reaches the disk
// all or nothing.

#include "types.h"
#include "riscv.h"
#include "defs.h"
#include "param.h"
#include "stat.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "fs.h"
#include "sleeplock.h"
#include "file.h"
#include "fcntl.h"

// The n'th argument as a file descriptor: sets *pfd and *pf (either may
// be 0). Returns 0, or -1 if it is not an open descriptor.
static int
argfd(int n, int *pfd, struct file **pf)
{
  int fd;
  struct file *f;

  argint(n, &fd);
  if(fd < 0 || fd >= NOFILE || (f = myproc()->ofile[fd]) == 0)
    return -1;
  if(pfd)
    *pfd = fd;
  if(pf)
    *pf = f;
  return 0;
}

// The lowest free descriptor, now referring to f; -1 if all are taken.
static int
fdalloc(struct file *f)
{
  int fd;
  struct proc *p = myproc();

  for(fd = 0; fd < NOFILE; fd++){
    if(p->ofile[fd] == 0){
      p->ofile[fd] = f;
      return fd;
    }
  }
  return -1;
}

uint64
sys_dup(void)
{
  struct file *f;
  int fd;

  if(argfd(0, 0, &f) < 0)
    return -1;
  if((fd = fdalloc(f)) < 0)
    return -1;
  filedup(f);
  return fd;
}

// read(fd, buf, n): the whole buffer must be writable user memory
uint64
sys_read(void)
{
  struct file *f;
  int n;
  uint64 p;

  argint(2, &n);
  if(argfd(0, 0, &f) < 0 || n < 0)
    return -1;
  if(argptr(1, &p, n, 1, 1) < 0)
    return -1;
  return fileread(f, p, n);
}

// write(fd, buf, n): the whole buffer must be readable user memory
uint64
sys_write(void)
{
  struct file *f;
  int n;
  uint64 p;

  argint(2, &n);
  if(argfd(0, 0, &f) < 0 || n < 0)
    return -1;
  if(argptr(1, &p, n, 1, 0) < 0)
    return -1;
  return filewrite(f, p, n);
}

uint64
sys_close(void)
{
  int fd;
  struct file *f;

  if(argfd(0, &fd, &f) < 0)
    return -1;
  myproc()->ofile[fd] = 0;
  fileclose(f);
  return 0;
}

// fstat(fd, struct stat *st)
uint64
sys_fstat(void)
{
  struct file *f;
  uint64 st;

  if(argfd(0, 0, &f) < 0)
    return -1;
  if(argptr(1, &st, sizeof(struct stat), sizeof(uint64), 1) < 0)
    return -1;
  return filestat(f, st);
}

// link(old, new): a new name for an existing file (not a directory)
uint64
sys_link(void)
{
  char name[DIRSIZ], new[MAXPATH], old[MAXPATH];
  struct inode *dp, *ip;

  if(argstr(0, old, MAXPATH) < 0 || argstr(1, new, MAXPATH) < 0)
    return -1;
  begin_op();
  if((ip = namei(old)) == 0){
    end_op();
    return -1;
  }

  ilock(ip);
  if(ip->type != T_FILE && ip->type != T_DEVICE){
    iunlockput(ip);
    end_op();
    return -1;
  }
  ip->nlink++;
  iupdate(ip);
  iunlock(ip);

  if((dp = nameiparent(new, name)) == 0)
    goto bad;
  ilock(dp);
  if(dp->dev != ip->dev || dirlink(dp, name, ip->inum) < 0){
    iunlockput(dp);
    goto bad;
  }
  iunlockput(dp);
  iput(ip);
  end_op();
  return 0;

bad:
  ilock(ip);
  ip->nlink--;
  iupdate(ip);
  iunlockput(ip);
  end_op();
  return -1;
}

// Is directory dp empty except for "." and ".."? (A directory the disk
// cannot read counts as full.)
static int
isdirempty(struct inode *dp)
{
  int off;
  struct dirent de;

  for(off = 2*sizeof(de); off < dp->size; off += sizeof(de)){
    if(readi(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
      return 0;
    if(de.inum != 0)
      return 0;
  }
  return 1;
}

// unlink(path): remove a name; a directory must be empty
uint64
sys_unlink(void)
{
  struct inode *ip, *dp;
  struct dirent de;
  char name[DIRSIZ], path[MAXPATH];
  uint off;

  if(argstr(0, path, MAXPATH) < 0)
    return -1;
  begin_op();
  if((dp = nameiparent(path, name)) == 0){
    end_op();
    return -1;
  }

  ilock(dp);

  // cannot unlink "." or ".."
  if(namecmp(name, ".") == 0 || namecmp(name, "..") == 0)
    goto bad;
  if((ip = dirlookup(dp, name, &off)) == 0)
    goto bad;
  if(ip == dp){
    // an entry naming its own directory (a damaged disk): locking it
    // again would deadlock
    iput(ip);
    goto bad;
  }
  ilock(ip);

  if(ip->nlink < 1 || (ip->type == T_DIR && !isdirempty(ip))){
    iunlockput(ip);
    goto bad;
  }

  memset(&de, 0, sizeof(de));
  if(writei(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de)){
    iunlockput(ip);
    goto bad;
  }
  if(ip->type == T_DIR){
    dp->nlink--;        // the child's ".." is gone
    iupdate(dp);
  }
  iunlockput(dp);

  ip->nlink--;
  iupdate(ip);
  iunlockput(ip);
  end_op();
  return 0;

bad:
  iunlockput(dp);
  end_op();
  return -1;
}

// Create path as a new inode of the given type, or, for T_FILE, return
// the existing file. Returns the inode locked, or 0.
static struct inode*
create(char *path, short type, short major, short minor)
{
  struct inode *ip, *dp;
  char name[DIRSIZ];

  if((dp = nameiparent(path, name)) == 0)
    return 0;
  ilock(dp);

  if((ip = dirlookup(dp, name, 0)) != 0){
    iunlockput(dp);
    ilock(ip);
    if(type == T_FILE && (ip->type == T_FILE || ip->type == T_DEVICE))
      return ip;
    iunlockput(ip);
    return 0;
  }

  if((ip = ialloc(dp->dev, type)) == 0){
    iunlockput(dp);
    return 0;
  }

  ilock(ip);
  ip->major = major;
  ip->minor = minor;
  ip->nlink = 1;
  iupdate(ip);

  if(type == T_DIR){
    // "." and ".."; no nlink for "." to avoid a cyclic count
    if(dirlink(ip, ".", ip->inum) < 0 || dirlink(ip, "..", dp->inum) < 0)
      goto fail;
  }
  if(dirlink(dp, name, ip->inum) < 0)
    goto fail;
  if(type == T_DIR){
    dp->nlink++;        // for the child's ".."
    iupdate(dp);
  }
  iunlockput(dp);
  return ip;

fail:
  // de-allocate ip (the disk filled up)
  ip->nlink = 0;
  iupdate(ip);
  iunlockput(ip);
  iunlockput(dp);
  return 0;
}

// open(path, flags): flags from fcntl.h
uint64
sys_open(void)
{
  char path[MAXPATH];
  int fd, omode, acc;
  struct file *f;
  struct inode *ip;

  argint(1, &omode);
  if(argstr(0, path, MAXPATH) < 0)
    return -1;
  acc = omode & 3;
  if(acc == 3 || (omode & ~(3 | O_CREATE | O_TRUNC)) != 0)
    return -1;

  begin_op();
  if(omode & O_CREATE){
    if((ip = create(path, T_FILE, 0, 0)) == 0){
      end_op();
      return -1;
    }
  } else {
    if((ip = namei(path)) == 0){
      end_op();
      return -1;
    }
    ilock(ip);
    if(ip->type == 0 || (ip->type == T_DIR && acc != O_RDONLY)){
      iunlockput(ip);   // type 0: a corrupt inode (fs.c ilock)
      end_op();
      return -1;
    }
  }

  if(ip->type == T_DEVICE && (ip->major < 0 || ip->major >= NDEV ||
                              devsw[ip->major].read == 0)){
    iunlockput(ip);
    end_op();
    return -1;
  }

  if((f = filealloc()) == 0 || (fd = fdalloc(f)) < 0){
    if(f)
      fileclose(f);     // a fresh file: no inode, no log operation
    iunlockput(ip);
    end_op();
    return -1;
  }

  if(ip->type == T_DEVICE){
    f->type = FD_DEVICE;
    f->major = ip->major;
  } else {
    f->type = FD_INODE;
    f->off = 0;
  }
  f->ip = ip;
  f->readable = acc != O_WRONLY;
  f->writable = acc == O_WRONLY || acc == O_RDWR;

  if((omode & O_TRUNC) && ip->type == T_FILE && f->writable)
    itrunc(ip);

  iunlock(ip);
  end_op();
  return fd;
}

uint64
sys_mkdir(void)
{
  char path[MAXPATH];
  struct inode *ip;

  if(argstr(0, path, MAXPATH) < 0)
    return -1;
  begin_op();
  if((ip = create(path, T_DIR, 0, 0)) == 0){
    end_op();
    return -1;
  }
  iunlockput(ip);
  end_op();
  return 0;
}

// mknod(path, major, minor): a device file
uint64
sys_mknod(void)
{
  struct inode *ip;
  char path[MAXPATH];
  int major, minor;

  argint(1, &major);
  argint(2, &minor);
  if(major < 0 || major >= NDEV || minor < 0 || minor > 0x7fff)
    return -1;
  if(argstr(0, path, MAXPATH) < 0)
    return -1;
  begin_op();
  if((ip = create(path, T_DEVICE, major, minor)) == 0){
    end_op();
    return -1;
  }
  if(ip->type != T_DEVICE){
    // an existing plain file of that name
    iunlockput(ip);
    end_op();
    return -1;
  }
  iunlockput(ip);
  end_op();
  return 0;
}

uint64
sys_chdir(void)
{
  char path[MAXPATH];
  struct inode *ip;
  struct proc *p = myproc();

  if(argstr(0, path, MAXPATH) < 0)
    return -1;
  begin_op();
  if((ip = namei(path)) == 0){
    end_op();
    return -1;
  }
  ilock(ip);
  if(ip->type != T_DIR){
    iunlockput(ip);
    end_op();
    return -1;
  }
  iunlock(ip);
  iput(p->cwd);
  end_op();
  p->cwd = ip;
  return 0;
}

// exec(path, argv): argv is a 0-terminated array of at most MAXARG
// strings, each at most a page long
uint64
sys_exec(void)
{
  char path[MAXPATH], *argv[MAXARG + 1];
  int i, ret = -1;
  uint64 uargv, uarg;

  argaddr(1, &uargv);
  if(argstr(0, path, MAXPATH) < 0)
    return -1;
  memset(argv, 0, sizeof(argv));
  for(i = 0;; i++){
    if(i > MAXARG)
      goto out;
    if(fetchaddr(uargv + sizeof(uint64)*i, &uarg) < 0)
      goto out;
    if(uarg == 0)
      break;
    if((argv[i] = kalloc()) == 0)
      goto out;
    if(fetchstr(uarg, argv[i], PGSIZE) < 0)
      goto out;
  }
  ret = kexec(path, argv);

out:
  for(i = 0; i <= MAXARG && argv[i] != 0; i++)
    kfree(argv[i]);
  return ret;
}

// pipe(int fds[2]): fds[0] the read end, fds[1] the write end
uint64
sys_pipe(void)
{
  uint64 fdarray;
  struct file *rf, *wf;
  int fds[2];
  struct proc *p = myproc();

  if(argptr(0, &fdarray, sizeof(fds), sizeof(int), 1) < 0)
    return -1;
  if(pipealloc(&rf, &wf) < 0)
    return -1;
  fds[0] = fds[1] = -1;
  if((fds[0] = fdalloc(rf)) < 0 || (fds[1] = fdalloc(wf)) < 0){
    if(fds[0] >= 0)
      p->ofile[fds[0]] = 0;
    fileclose(rf);
    fileclose(wf);
    return -1;
  }
  if(copyout(p->pagetable, fdarray, (char*)fds, sizeof(fds)) < 0){
    p->ofile[fds[0]] = 0;
    p->ofile[fds[1]] = 0;
    fileclose(rf);
    fileclose(wf);
    return -1;
  }
  return 0;
}
