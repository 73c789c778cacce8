// nfc.h: Unicode NFC normalisation for the guest tokenizer (nfc.c).
int nfc(const uchar *in, int n, uchar **out);
