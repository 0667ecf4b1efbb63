/*
 * inspect_write.c - writes an inspect run's model (inspect.h) out: the plan
 * table or plan JSON, then the unconsumed, missing and error lists, in
 * pieces of about 64 KiB through the caller's write function.
 */
#include "report/inspect.h"

#include <stdio.h>

static moeq_status flush(inspect *in, moeq__sb *sb, moeq_write_fn write, void *user) {
    if (sb->failed) return nomem(in);
    if (sb->len == 0) return MOEQ_STATUS_OK;
    int32_t rc = write(sb->data, sb->len, user);
    sb->len = 0;
    if (rc != 0) {
        return moeq__error(in->err, MOEQ_STATUS_IO, "the inspect writer stopped with code %d",
                           (int)rc);
    }
    return MOEQ_STATUS_OK;
}

#define FLUSH_AT (1u << 16)

static moeq_status text_list(inspect *in, const issue_list *l, const char *title, bool errors,
                             moeq__sb *sb, moeq_write_fn write, void *user) {
    moeq__sb_printf(sb, "\n%s: %llu\n", title, (unsigned long long)(l->n + l->unlisted));
    for (uint32_t i = 0; i < l->n; i++) {
        if (errors) {
            moeq__sb_printf(sb, "  %s: %s: %s\n", l->v[i].name, moeq_status_name(l->v[i].status),
                            l->v[i].text);
        } else {
            moeq__sb_printf(sb, "  %s\n      %s\n", l->v[i].name, l->v[i].text);
        }
        if (sb->len > FLUSH_AT) {
            moeq_status st = flush(in, sb, write, user);
            if (st != MOEQ_STATUS_OK) return st;
        }
    }
    if (l->unlisted) {
        moeq__sb_printf(sb, "  ... and %llu more, not listed (at most %u are)\n",
                        (unsigned long long)l->unlisted, MAX_LISTED);
    }
    return MOEQ_STATUS_OK;
}

static moeq_status json_list(inspect *in, const issue_list *l, const char *key, bool errors,
                             moeq__sb *sb, moeq_write_fn write, void *user) {
    moeq__sb_printf(sb, ",\n\"%s\":[", key);
    for (uint32_t i = 0; i < l->n; i++) {
        const issue *it = &l->v[i];
        moeq__sb_puts(sb, i ? ",\n{" : "\n{");
        if (errors) {
            moeq__sb_puts(sb, "\"module\":");
            moeq__sb_json_string(sb, it->name);
            moeq__sb_puts(sb, ",\"status\":");
            moeq__sb_json_string(sb, moeq_status_name(it->status));
            moeq__sb_puts(sb, ",\"message\":");
        } else {
            moeq__sb_puts(sb, "\"tensor\":");
            moeq__sb_json_string(sb, it->name);
            moeq__sb_puts(sb, ",\"module\":");
            char *mod = moeq__strndup(it->name, module_len(it->name));
            if (!mod) return nomem(in);
            moeq__sb_json_string(sb, mod);
            moeq__free(mod);
            moeq__sb_puts(sb, ",\"reason\":");
        }
        moeq__sb_json_string(sb, it->text);
        moeq__sb_putc(sb, '}');
        if (sb->len > FLUSH_AT) {
            moeq_status st = flush(in, sb, write, user);
            if (st != MOEQ_STATUS_OK) return st;
        }
    }
    moeq__sb_puts(sb, l->n ? "\n]" : "]");
    return MOEQ_STATUS_OK;
}

moeq_status moeq__inspect_emit(inspect *in, moeq_write_fn write, void *user) {
    moeq__sb sb;
    moeq__sb_init(&sb);
    moeq_status st = MOEQ_STATUS_OK;
    const moeq_inspect_summary *s = &in->sum;
    if (in->opts && in->opts->json) {
        moeq__plan_json pj;
        memset(&pj, 0, sizeof pj);
        pj.cfg = in->cfg;
        pj.engine = in->engine;
        char **wj = NULL, **ij = NULL;
        st = moeq__plan_args_json(in->cfg, &wj, &ij);
        if (st == MOEQ_STATUS_OK) {
            pj.weights_json = wj;
            pj.input_json = ij;
            moeq__sb_puts(&sb, "{\"modules\":[");
            for (uint32_t r = 0; r < in->n_rows && st == MOEQ_STATUS_OK; r++) {
                const moeq__plan_row *row = &in->rows[r];
                moeq__plan_json_row(&pj, row, r == 0, &sb);
                if (sb.len > FLUSH_AT) st = flush(in, &sb, write, user);
            }
            moeq__sb_puts(&sb, in->n_rows ? "\n]" : "]");
        } else {
            st = nomem(in);
        }
        moeq__plan_json_free(&pj);
        moeq__plan_args_json_free(in->cfg, wj, ij);
        if (st == MOEQ_STATUS_OK) st = json_list(in, &in->unconsumed, "unconsumed", false, &sb, write, user);
        if (st == MOEQ_STATUS_OK) st = json_list(in, &in->missing, "missing", false, &sb, write, user);
        if (st == MOEQ_STATUS_OK) st = json_list(in, &in->errors, "errors", true, &sb, write, user);
        moeq__sb_printf(&sb,
                        ",\n\"summary\":{\"tensors\":%llu,\"modules\":%llu,\"moe_layers\":%llu,"
                        "\"expert_modules\":%llu,\"quantized\":%llu,\"ignored\":%llu,"
                        "\"unmatched\":%llu,\"unconsumed\":%llu,\"missing\":%llu,\"errors\":%llu,"
                        "\"warnings\":%llu}}\n",
                        (unsigned long long)s->tensors, (unsigned long long)s->modules,
                        (unsigned long long)s->moe_layers, (unsigned long long)s->expert_modules,
                        (unsigned long long)s->quantized, (unsigned long long)s->ignored,
                        (unsigned long long)s->unmatched, (unsigned long long)s->unconsumed,
                        (unsigned long long)s->missing, (unsigned long long)s->errors,
                        (unsigned long long)s->warnings);
    } else {
        moeq__plan_table(in->rows, in->n_rows, &sb);
        st = flush(in, &sb, write, user);
        if (st == MOEQ_STATUS_OK) {
            st = text_list(in, &in->unconsumed, "unconsumed tensors", false, &sb, write, user);
        }
        if (st == MOEQ_STATUS_OK) st = text_list(in, &in->missing, "missing tensors", false, &sb, write, user);
        if (st == MOEQ_STATUS_OK) st = text_list(in, &in->errors, "module errors", true, &sb, write, user);
        moeq__sb_printf(&sb,
                        "\nsummary: %llu tensors, %llu modules (%llu MoE layers of %llu expert "
                        "modules; %llu quantized, %llu ignored, %llu unmatched); %llu unconsumed, "
                        "%llu missing, %llu module errors, %llu warnings\n",
                        (unsigned long long)s->tensors, (unsigned long long)s->modules,
                        (unsigned long long)s->moe_layers, (unsigned long long)s->expert_modules,
                        (unsigned long long)s->quantized, (unsigned long long)s->ignored,
                        (unsigned long long)s->unmatched, (unsigned long long)s->unconsumed,
                        (unsigned long long)s->missing, (unsigned long long)s->errors,
                        (unsigned long long)s->warnings);
    }
    if (st == MOEQ_STATUS_OK) st = flush(in, &sb, write, user);
    moeq__sb_free(&sb);
    return st;
}
