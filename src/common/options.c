/* options.c: see include/mooncake/options.h. */
#include "mooncake/options.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/errbuf.h"
#include "common/xalloc.h"

/* fail: the reason into err, and MC_OPTS_ERROR */
#define fail(err, errlen, ...) (mc_errf((err), (errlen), __VA_ARGS__), MC_OPTS_ERROR)

int mc_parse_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on", "t", "y"};
    static const char *const no[] = {"false", "0", "no", "off", "f", "n"};
    if (!text)
        return -EINVAL;
    /* "" is false: the bindings' setup(config) has always read an empty value so */
    if (!*text) {
        *out = false;
        return 0;
    }
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

int mc_parse_size(const char *text, uint64_t *out)
{
    if (!text)
        return -EINVAL;
    while (isspace((unsigned char)*text))
        text++;
    /* upstream's "infinite" (any case, spaces around): no limit */
    size_t tl = strlen(text);
    while (tl && isspace((unsigned char)text[tl - 1]))
        tl--;
    if (tl == 8 && strncasecmp(text, "infinite", 8) == 0) {
        *out = UINT64_MAX;
        return 0;
    }
    if (*text == '+') /* an explicit sign, as strtod and upstream's stod take it */
        text++;
    if (!isdigit((unsigned char)*text) && *text != '.')
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno == ERANGE || !isfinite(v) || v < 0)
        return errno == ERANGE ? -ERANGE : -EINVAL;
    while (isspace((unsigned char)*end))
        end++;
    double mult = 1;
    if (*end) {
        char unit[8] = {0};
        size_t len = strlen(end);
        while (len && isspace((unsigned char)end[len - 1]))
            len--;
        if (len >= sizeof unit)
            return -EINVAL;
        for (size_t i = 0; i < len; i++)
            unit[i] = (char)tolower((unsigned char)end[i]);
        static const struct { const char *u; double m; } units[] = {
            {"b", 1},
            {"k", 1024.0}, {"kb", 1024.0}, {"kib", 1024.0},
            {"m", 1048576.0}, {"mb", 1048576.0}, {"mib", 1048576.0},
            {"g", 1073741824.0}, {"gb", 1073741824.0}, {"gib", 1073741824.0},
            {"t", 1099511627776.0}, {"tb", 1099511627776.0}, {"tib", 1099511627776.0},
        };
        bool found = false;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            if (strcmp(unit, units[i].u) == 0) {
                mult = units[i].m;
                found = true;
                break;
            }
        }
        if (!found)
            return -EINVAL;
    }
    double bytes = v * mult;
    if (bytes >= 18446744073709551615.0)
        return -ERANGE;
    if (mult == 1 && bytes != floor(bytes))
        return -EINVAL; /* a fraction of a byte */
    *out = (uint64_t)bytes;
    return 0;
}

static const mc_option *find(const mc_option *tbl, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        if (strlen(tbl[i].name) == len && strncmp(tbl[i].name, name, len) == 0)
            return &tbl[i];
        if (tbl[i].alias && strlen(tbl[i].alias) == len &&
            strncmp(tbl[i].alias, name, len) == 0)
            return &tbl[i];
    }
    return NULL;
}

static int check_bounds(const mc_option *o, double v, const char *src, const char *text,
                        char *err, size_t errlen)
{
    if (o->bounded && (v < o->min || v > o->max))
        return fail(err, errlen, "value '%s' for %s%s is out of range [%g, %g]%s%s", text,
                    src, o->name, o->min, o->max, o->unit && *o->unit ? " " : "",
                    o->unit ? o->unit : "");
    return 0;
}

/* Stores text into o's target after checking it. src prefixes the flag in messages. */
static int set_value(const mc_option *o, const char *text, const char *src, char *err,
                     size_t errlen)
{
    switch (o->type) {
    case MC_OPT_BOOL: {
        bool b;
        if (mc_parse_bool(text, &b) != 0)
            return fail(err, errlen, "invalid value '%s' for %s%s: expected true or false",
                        text, src, o->name);
        *(bool *)o->target = b;
        return 0;
    }
    case MC_OPT_INT: {
        char *end;
        errno = 0;
        /* as gflags: decimal, or hex after 0x; a leading 0 is not octal ("010" is 10) */
        const char *d = text + (*text == '-' || *text == '+');
        int base = d[0] == '0' && (d[1] == 'x' || d[1] == 'X') ? 16 : 10;
        long long v = strtoll(text, &end, base);
        if (!*text || *end || errno == ERANGE)
            return fail(err, errlen, "invalid value '%s' for %s%s: expected an integer",
                        text, src, o->name);
        if (check_bounds(o, (double)v, src, text, err, errlen))
            return MC_OPTS_ERROR;
        *(int64_t *)o->target = (int64_t)v;
        return 0;
    }
    case MC_OPT_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (!*text || *end || errno == ERANGE || !isfinite(v))
            return fail(err, errlen, "invalid value '%s' for %s%s: expected a number", text,
                        src, o->name);
        if (check_bounds(o, v, src, text, err, errlen))
            return MC_OPTS_ERROR;
        *(double *)o->target = v;
        return 0;
    }
    case MC_OPT_SIZE: {
        uint64_t v;
        if (mc_parse_size(text, &v) != 0)
            return fail(err, errlen,
                        "invalid value '%s' for %s%s: expected a size in bytes (e.g. 4096, "
                        "64KB, 4GB)",
                        text, src, o->name);
        if (check_bounds(o, (double)v, src, text, err, errlen))
            return MC_OPTS_ERROR;
        *(uint64_t *)o->target = v;
        return 0;
    }
    case MC_OPT_STRING: {
        if (o->nonempty && !*text)
            return fail(err, errlen, "invalid value '' for %s%s: expected a non-empty value "
                        "(leave the flag out for its default '%s')",
                        src, o->name, o->def ? o->def : "");
        char *copy = mc_xstrdup(text);
        char **slot = (char **)o->target;
        free(*slot);
        *slot = copy;
        return 0;
    }
    }
    return fail(err, errlen, "option %s has an unknown type", o->name);
}

int mc_options_set(const mc_option *tbl, size_t n, const char *name, const char *value,
                   const char *source, char *err, size_t errlen)
{
    const mc_option *o = find(tbl, n, name, strlen(name));
    if (!o)
        return fail(err, errlen, "unknown flag %s%s", source ? source : "--", name);
    return set_value(o, value, source ? source : "--", err, errlen);
}

int mc_options_load_json(const mc_option *tbl, size_t n, const char *path, char *err,
                         size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        if (jerr.line < 1) /* jansson: -1 when no line applies (the file cannot be read) */
            return fail(err, errlen, "cannot read config file %s: %s", path, jerr.text);
        return fail(err, errlen, "cannot read config file %s: %s (line %d)", path, jerr.text,
                    jerr.line);
    }
    int rc = 0;
    if (!json_is_object(root)) {
        rc = fail(err, errlen, "config file %s: expected a JSON object of flag -> value", path);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        const mc_option *o = find(tbl, n, key, strlen(key));
        if (!o) {
            rc = fail(err, errlen, "config file %s: unknown flag '%s'", path, key);
            goto out;
        }
        char text[64];
        const char *s = text;
        if (json_is_string(val))
            s = json_string_value(val);
        else if (json_is_true(val) || json_is_false(val))
            s = json_is_true(val) ? "true" : "false";
        else if (json_is_integer(val))
            snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(val));
        else if (json_is_real(val))
            snprintf(text, sizeof text, "%.17g", json_real_value(val));
        else {
            rc = fail(err, errlen, "config file %s: flag '%s' must be a string, number or bool",
                      path, key);
            goto out;
        }
        char src[300];
        snprintf(src, sizeof src, "config %s: ", path);
        if (set_value(o, s, src, err, errlen)) {
            rc = MC_OPTS_ERROR;
            goto out;
        }
    }
out:
    json_decref(root);
    return rc;
}

/* Splits argv[i] ("--name=value", "-name", ...) into name/len/value. Returns false when
 * the argument is not a flag. */
static bool split_flag(const char *arg, const char **name, size_t *len, const char **value)
{
    if (arg[0] != '-' || arg[1] == '\0')
        return false;
    const char *p = arg + 1;
    if (*p == '-')
        p++;
    if (*p == '\0')
        return false;
    const char *eq = strchr(p, '=');
    *name = p;
    *len = eq ? (size_t)(eq - p) : strlen(p);
    *value = eq ? eq + 1 : NULL;
    return true;
}

int mc_options_parse(const mc_option *tbl, size_t n, int *argc, char **argv, char *err,
                     size_t errlen)
{
    /* 1. defaults */
    for (size_t i = 0; i < n; i++) {
        if (tbl[i].type == MC_OPT_STRING) {
            if (set_value(&tbl[i], tbl[i].def ? tbl[i].def : "", "default --", err, errlen))
                return MC_OPTS_ERROR;
        } else if (tbl[i].def && set_value(&tbl[i], tbl[i].def, "default --", err, errlen)) {
            return MC_OPTS_ERROR;
        }
    }
    /* 2. --help and --config_path, looked for before anything else is applied */
    const char *config_path = NULL;
    for (int i = 1; i < *argc; i++) {
        const char *name, *value;
        size_t len;
        if (strcmp(argv[i], "--") == 0)
            break;
        if (!split_flag(argv[i], &name, &len, &value))
            continue;
        if ((len == 4 && strncmp(name, "help", 4) == 0) || (len == 1 && name[0] == 'h'))
            return MC_OPTS_HELP;
        if (len == 11 && strncmp(name, "config_path", 11) == 0) {
            if (!value) {
                if (i + 1 >= *argc)
                    return fail(err, errlen, "missing value for --config_path");
                value = argv[i + 1];
            }
            config_path = value;
        }
    }
    if (!config_path) {
        const mc_option *o = find(tbl, n, "config_path", 11);
        if (o && o->type == MC_OPT_STRING && o->env && getenv(o->env) && *getenv(o->env))
            config_path = getenv(o->env);
    }
    if (config_path && *config_path &&
        mc_options_load_json(tbl, n, config_path, err, errlen))
        return MC_OPTS_ERROR;
    /* 3. environment */
    for (size_t i = 0; i < n; i++) {
        const char *v = tbl[i].env ? getenv(tbl[i].env) : NULL;
        if (v) {
            char src[128];
            snprintf(src, sizeof src, "env %s for --", tbl[i].env);
            if (set_value(&tbl[i], v, src, err, errlen))
                return MC_OPTS_ERROR;
        }
    }
    /* 4. command line; positional arguments are compacted to the front */
    int out = 1;
    int i = 1;
    for (; i < *argc; i++) {
        const char *arg = argv[i];
        const char *name, *value;
        size_t len;
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (!split_flag(arg, &name, &len, &value)) {
            argv[out++] = argv[i];
            continue;
        }
        const mc_option *o = find(tbl, n, name, len);
        if (!o && len > 2 && strncmp(name, "no", 2) == 0 && !value) {
            const mc_option *neg = find(tbl, n, name + 2, len - 2);
            if (neg && neg->type == MC_OPT_BOOL) {
                *(bool *)neg->target = false;
                continue;
            }
        }
        if (!o) {
            if (len == 11 && strncmp(name, "config_path", 11) == 0) {
                if (!value)
                    i++; /* its value was consumed in step 2 */
                continue;
            }
            return fail(err, errlen, "unknown flag --%.*s (see --help)", (int)len, name);
        }
        if (!value) {
            if (o->type == MC_OPT_BOOL) {
                /* "--flag true" is not gflags; a bare boolean flag means true */
                *(bool *)o->target = true;
                continue;
            }
            if (i + 1 >= *argc)
                return fail(err, errlen, "missing value for --%s", o->name);
            value = argv[++i];
        }
        if (set_value(o, value, "--", err, errlen))
            return MC_OPTS_ERROR;
    }
    for (; i < *argc; i++)
        argv[out++] = argv[i];
    *argc = out;
    argv[out] = NULL;
    return MC_OPTS_OK;
}

static const char *type_name(mc_opt_type t)
{
    switch (t) {
    case MC_OPT_BOOL: return "bool";
    case MC_OPT_INT: return "int";
    case MC_OPT_DOUBLE: return "double";
    case MC_OPT_STRING: return "string";
    case MC_OPT_SIZE: return "size";
    }
    return "?";
}

void mc_options_print_help(FILE *out, const char *prog, const char *summary,
                           const mc_option *tbl, size_t n)
{
    fprintf(out, "Usage: %s [--flag=value ...]\n", prog);
    if (summary && *summary)
        fprintf(out, "%s\n", summary);
    fprintf(out, "\nFlags (also read from --config_path JSON and the environment where "
                 "shown):\n");
    for (size_t i = 0; i < n; i++) {
        const mc_option *o = &tbl[i];
        fprintf(out, "  --%s", o->name);
        if (o->alias)
            fprintf(out, " (or --%s)", o->alias);
        fprintf(out, " (%s%s%s, default \"%s\"", type_name(o->type),
                o->unit && *o->unit ? ", " : "", o->unit ? o->unit : "", o->def ? o->def : "");
        if (o->bounded)
            fprintf(out, ", range [%g, %g]", o->min, o->max);
        if (o->env)
            fprintf(out, ", env %s", o->env);
        fprintf(out, ")\n      %s\n", o->help ? o->help : "");
    }
}

void mc_options_main(const mc_option *tbl, size_t n, int *argc, char **argv,
                     const char *summary)
{
    char err[512];
    const char *prog = argv[0] ? strrchr(argv[0], '/') : NULL;
    prog = prog ? prog + 1 : (argv[0] ? argv[0] : "program");
    int rc = mc_options_parse(tbl, n, argc, argv, err, sizeof err);
    if (rc == MC_OPTS_HELP) {
        mc_options_print_help(stdout, prog, summary, tbl, n);
        exit(0);
    }
    if (rc != MC_OPTS_OK) {
        fprintf(stderr, "%s: %s\nTry '%s --help' for the list of flags.\n", prog, err, prog);
        exit(2);
    }
}

void mc_options_free(const mc_option *tbl, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (tbl[i].type == MC_OPT_STRING) {
            char **slot = (char **)tbl[i].target;
            free(*slot);
            *slot = NULL;
        }
    }
}
