/* options.h: one table per program -> flags, environment, JSON config file, --help.
 *
 * Each program declares one `mc_option` array. From it come:
 *   - gflags-style command-line parsing, as upstream's tools use (gflags): `--name=value`,
 *     `--name value`, `-name=value`, and for booleans `--name`, `--noname`,
 *     `--name=true|false|1|0|yes|no|on|off`;
 *   - environment variables (the row's `env`, when set);
 *   - a JSON config file given by `--config_path=FILE` (an object of name -> value; as
 *     upstream mooncake_master's --config_path);
 *   - `--help` / `-h`, listing every row with type, default, bounds, unit and help.
 * Precedence, lowest first: default, config file, environment, command line.
 * Unknown or malformed flags and out-of-bounds values are errors whose message names the
 * flag; mc_options_main() prints it and exits with status 2.
 */
#ifndef MOONCAKE_OPTIONS_H
#define MOONCAKE_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mooncake/mc_api.h"

typedef enum mc_opt_type {
    MC_OPT_BOOL,   /* target: bool *                                              */
    MC_OPT_INT,    /* target: int64_t *                                           */
    MC_OPT_DOUBLE, /* target: double *                                            */
    MC_OPT_STRING, /* target: char ** (malloc'd, owned by the table; see _free)   */
    MC_OPT_SIZE,   /* target: uint64_t *, bytes; accepts 4096, 64k, 4gb, 1.5GiB   */
} mc_opt_type;

typedef struct mc_option {
    const char *name;  /* flag name without dashes, upstream spelling ("rpc_port") */
    const char *alias; /* second accepted name or NULL ("port")                     */
    mc_opt_type type;
    void *target;      /* where the value is stored (type above)                   */
    const char *def;   /* default, as text ("50051", "0.9", "true", "4gb", "")      */
    bool bounded;      /* when true, numeric values must lie in [min, max]          */
    double min, max;
    const char *unit;  /* "ms", "s", "bytes", "" ...: shown in --help               */
    const char *env;   /* environment variable that sets it, or NULL                */
    const char *help;  /* one line                                                  */
    /* non-NULL: the flag is accepted at its default only (an upstream flag whose other
     * values ask for something mooncake-c does not implement). The text says what and
     * what mooncake-c does instead; mc_options_parse does not look at it: the tool calls
     * mc_tool_refuse_non_defaults (tools/tool_util.h) after parsing, which refuses any
     * other value with this text (exit 2). */
    const char *only_default;
    /* MC_OPT_STRING: an empty value (--name=, "" in a config file, an empty env
     * variable) is refused by mc_options_parse: for flags such as an address, where ""
     * would silently mean the default or nothing. Its def must not be empty (defaults
     * pass the same check). */
    bool nonempty;
} mc_option;

enum { MC_OPTS_OK = 0, MC_OPTS_HELP = 1, MC_OPTS_ERROR = -1 };

/* mc_options_parse: fills every row's target from defaults, the --config_path file,
 * the environment and argv, in that order of precedence.
 *   tbl/n: the program's table (borrowed; targets are written).
 *   argc/argv: in/out; recognised flags are removed, positional arguments are kept in
 *     order after argv[0] and *argc is updated. "--" ends flag parsing.
 *   err/errlen: receives a one-line message naming the flag on MC_OPTS_ERROR.
 * Returns MC_OPTS_OK, MC_OPTS_HELP (--help seen; nothing else validated), or
 * MC_OPTS_ERROR. Strings previously stored in STRING targets by this table are freed
 * and replaced. Not thread-safe (call at start-up). */
MC_API int mc_options_parse(const mc_option *tbl, size_t n, int *argc, char **argv,
                            char *err, size_t errlen);

/* mc_options_set: sets one option by name from text, with the same checks as the
 * command line. source names the origin for messages ("--", "env MC_X", "config").
 * Returns 0 or MC_OPTS_ERROR with err filled. */
MC_API int mc_options_set(const mc_option *tbl, size_t n, const char *name,
                          const char *value, const char *source, char *err, size_t errlen);

/* mc_options_load_json: applies a JSON config file (object of name -> string, number
 * or bool). Unknown names and bad values are errors naming the key and the file. */
MC_API int mc_options_load_json(const mc_option *tbl, size_t n, const char *path,
                                char *err, size_t errlen);

/* mc_options_print_help: prints "Usage: prog [flags]", summary, and one block per row. */
MC_API void mc_options_print_help(FILE *out, const char *prog, const char *summary,
                                  const mc_option *tbl, size_t n);

/* mc_options_main: mc_options_parse for a tool's main(): on --help prints the help and
 * exits 0; on an error prints "prog: <message>" and a hint to stderr and exits 2. */
MC_API void mc_options_main(const mc_option *tbl, size_t n, int *argc, char **argv,
                            const char *summary);

/* mc_options_free: frees the strings stored in STRING targets and NULLs them. */
MC_API void mc_options_free(const mc_option *tbl, size_t n);

/* mc_parse_size: "4096", "64k", "64KB", "4gb", "1.5GiB", "2 MB", "+8M", "1e3" -> bytes
 * (K/M/G/T are powers of 1024, as upstream's size strings); "infinite" -> UINT64_MAX
 * (upstream try_string_to_byte_size). Spaces around are ignored. A fraction of a byte
 * ("1.5") is refused. Shared by options, env.h and the Python bindings. Returns 0, or
 * -EINVAL for malformed text, -ERANGE on overflow. */
MC_API int mc_parse_size(const char *text, uint64_t *out);

/* mc_parse_bool: true/false/1/0/yes/no/on/off/t/f/y/n (any case); "" is false. Shared
 * by options, env.h (which treats "" as unset before calling it) and the Python
 * bindings. Returns 0 or -EINVAL. */
MC_API int mc_parse_bool(const char *text, bool *out);

#endif
