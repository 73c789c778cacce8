// user.h for user_c code compiled on the host: ulib's calls are libc's
// (types.h above includes them).
