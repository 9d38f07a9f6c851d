/* shapetrace: CPython's frame and thread-state layouts (pylayout.h), one table for the preload's
 * in-process reader and the snapshot's reader of another process. */
#include "common/pylayout.h"

#include <string.h>

bool shp_py_layout_from_debug(const struct shp_py_debug_offsets *d, uint32_t version,
                              struct shp_py_layout *L)
{
    if (memcmp(d->cookie, "xdebugpy", 8) != 0 || (d->version >> 16) != (version >> 16) ||
        d->free_threaded || d->ob_type != 8 || d->str_state != 32 || d->str_length != 16 ||
        d->bytes_ob_size != 16 || d->bytes_ob_sval != 32 || d->fr_size > 4096 ||
        d->co_size > 4096 || d->ts_size > 65536 || d->interp_size > (1u << 24))
        return false;
    uint64_t in_fr[] = {d->fr_previous, d->fr_executable, d->fr_instr_ptr, d->fr_owner};
    uint64_t in_co[] = {d->co_filename,  d->co_name,        d->co_qualname,
                        d->co_linetable, d->co_firstlineno, d->co_code_adaptive};
    uint64_t in_ts[] = {d->ts_current_frame, d->ts_next, d->ts_interp, d->ts_thread_id,
                        d->ts_native_thread_id};
    for (size_t i = 0; i < sizeof(in_fr) / sizeof(in_fr[0]); i++)
        if (in_fr[i] + 8 > d->fr_size)
            return false;
    for (size_t i = 0; i < sizeof(in_co) / sizeof(in_co[0]); i++)
        if (in_co[i] > d->co_size)
            return false;
    for (size_t i = 0; i < sizeof(in_ts) / sizeof(in_ts[0]); i++)
        if (in_ts[i] + 8 > d->ts_size)
            return false;
    if (d->runtime_finalizing + 8 > d->runtime_size ||
        d->runtime_interpreters_head + 8 > d->runtime_size || d->interp_next + 8 > d->interp_size ||
        d->interp_threads_head + 8 > d->interp_size)
        return false;
    *L = (struct shp_py_layout){
        .minor = 13,
        .ts_frame = (uint32_t)d->ts_current_frame,
        .cf_current = -1,
        .fr_back = (uint32_t)d->fr_previous,
        .fr_code = (uint32_t)d->fr_executable,
        .fr_instr = (uint32_t)d->fr_instr_ptr,
        .fr_owner = (int32_t)d->fr_owner,
        .fr_is_entry = -1,
        .owner_generator = 1,
        .owner_cstack = 3,
        .co_filename = (uint32_t)d->co_filename,
        .co_name = (uint32_t)d->co_name,
        .co_qualname = (uint32_t)d->co_qualname,
        .co_linetable = (uint32_t)d->co_linetable,
        .co_firstlineno = (uint32_t)d->co_firstlineno,
        /* Not among the debug offsets: 3.13.0's, where the fields around them are where 3.13.0
         * has them. */
        .co_firsttraceable = d->co_code_adaptive == 200 ? 184 : -1,
        .co_version = d->co_code_adaptive == 200 ? 92 : -1,
        .co_code = (uint32_t)d->co_code_adaptive,
        .str_ascii = (uint32_t)d->str_asciiobject_size,
        .str_compact = (uint32_t)d->str_asciiobject_size + 16,
        .rt_finalizing = (uint32_t)d->runtime_finalizing,
        .rt_interp_head = (uint32_t)d->runtime_interpreters_head,
        .interp_next = (uint32_t)d->interp_next,
        .interp_threads = (uint32_t)d->interp_threads_head,
        .ts_next = (uint32_t)d->ts_next,
        .ts_interp = (uint32_t)d->ts_interp,
        .ts_thread_id = (uint32_t)d->ts_thread_id,
        .ts_native_tid = (int32_t)d->ts_native_thread_id,
    };
    return true;
}

size_t shp_py_str_utf8(const unsigned char *data, unsigned kind, bool ascii, size_t len, char *out,
                       size_t cap)
{
    if (ascii) {
        size_t n = len < cap ? len : cap;
        if (out)
            memcpy(out, data, n);
        return n;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t c;
        if (kind == 1) {
            c = data[i];
        } else if (kind == 2) {
            uint16_t u;
            memcpy(&u, data + 2 * i, 2);
            c = u;
        } else {
            memcpy(&c, data + 4 * i, 4);
        }
        char enc[4];
        size_t m;
        if (c >= 0xd800 && c < 0xe000)
            c = '?'; /* a lone surrogate (surrogateescape'd file name) is no UTF-8 */
        if (c < 0x80) {
            enc[0] = (char)c, m = 1;
        } else if (c < 0x800) {
            enc[0] = (char)(0xc0 | c >> 6), enc[1] = (char)(0x80 | (c & 0x3f)), m = 2;
        } else if (c < 0x10000) {
            enc[0] = (char)(0xe0 | c >> 12), enc[1] = (char)(0x80 | ((c >> 6) & 0x3f));
            enc[2] = (char)(0x80 | (c & 0x3f)), m = 3;
        } else {
            enc[0] = (char)(0xf0 | c >> 18), enc[1] = (char)(0x80 | ((c >> 12) & 0x3f));
            enc[2] = (char)(0x80 | ((c >> 6) & 0x3f)), enc[3] = (char)(0x80 | (c & 0x3f)), m = 4;
        }
        if (n + m > cap)
            break;
        if (out)
            memcpy(out + n, enc, m);
        n += m;
    }
    return n;
}
