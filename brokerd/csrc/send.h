/* Send-request helpers shared by the lane (send.c). */
#ifndef BROKERD_SEND_H
#define BROKERD_SEND_H
#include "native.h"

typedef struct { const char *k; Py_ssize_t kn; const char *v; Py_ssize_t vn; } Prop;
#define MAX_PROPS_N 256

/* A ROCKETMQ binary header (code i16, language u8, version i16, opaque i32, flag i32, remark len32 + bytes,
 * extFields len32 + (key len16 + bytes, value len32 + bytes)*) as a Hdr of string fields, as the Python codec
 * reads it: fields with an empty key or value are left out. 0 ok; 1 malformed, over MAX_EXT fields or not
 * UTF-8 (the Python codec decides and writes the error). */
int parse_binary_header(const char *p, Py_ssize_t n, Hdr *h);
/* The ext field `key` (the last occurrence wins, as in a dict), NULL when absent. */
const Ext *find_ext(const Hdr *h, const char *key, Py_ssize_t klen);
/* The send header's field of `letter` (SendMessageRequestHeaderV2's a..m; SEND_MESSAGE's full name for it, see
 * index_letters), NULL when absent. */
static inline const Ext *send_field(const Hdr *h, char letter) {
    int i = h->letter[letter - 'a'];
    return i < 0 ? NULL : &h->ext[i];
}
/* int(field or default) as the Python processor reads it: 0 ok, 1 unsupported (Python parses it). */
int field_int(const Hdr *h, char letter, long long dflt, long long *out);
/* Properties as Java's string2messageProperties reads them (segments split on 0x02, name 0x01 value, both
 * non-empty; a later duplicate replaces the value in place). The count, -1 when there are too many. */
int parse_props(const char *s, Py_ssize_t n, Prop *out);
/* The same from a JSON string's escaped bytes when its only escapes are the separators \u0001 and \u0002, at most
 * one \u0001 per segment (what clients send; names and values then point into s); -2 otherwise (unescape it). */
int parse_props_json(const char *s, Py_ssize_t n, Prop *out);
const Prop *prop(const Prop *ps, int n, const char *k, Py_ssize_t kn);
/* The record's key-index keys (KEYS split on spaces, then UNIQ_KEY unless it is one of them), each handed to
 * fn(ctx, key, length); a non-zero return stops the walk and is returned. index_keys: them as a list of str. */
typedef int (*KeyFn)(void *ctx, const char *p, Py_ssize_t n);
int each_index_key(const Prop *keys, const Prop *uniq, KeyFn fn, void *ctx);
PyObject *index_keys(const Prop *keys, const Prop *uniq);
/* Java String.hashCode of valid UTF-8 (over UTF-16 code units): the consume-queue tags code. */
int32_t java_hash(const unsigned char *s, Py_ssize_t n);
int crc_of(const char *p, Py_ssize_t n, uint32_t *out);  /* zlib.crc32 over the bytes (crc.c); -1 on error */
long long now_ms(void);

#endif
