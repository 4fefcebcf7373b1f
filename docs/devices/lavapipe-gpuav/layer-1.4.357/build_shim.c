/* Definitions for C23 entry points referenced by the static libstdc++ of a glibc 2.38+ build. */
#include <stdlib.h>
#include <stdio.h>
#include <stdarg.h>
#include <wchar.h>
#include <inttypes.h>
#define H __attribute__((visibility("hidden")))
H long __isoc23_strtol(const char *s, char **e, int b) { return strtol(s, e, b); }
H unsigned long __isoc23_strtoul(const char *s, char **e, int b) { return strtoul(s, e, b); }
H long long __isoc23_strtoll(const char *s, char **e, int b) { return strtoll(s, e, b); }
H unsigned long long __isoc23_strtoull(const char *s, char **e, int b) { return strtoull(s, e, b); }
H intmax_t __isoc23_strtoimax(const char *s, char **e, int b) { return strtoimax(s, e, b); }
H uintmax_t __isoc23_strtoumax(const char *s, char **e, int b) { return strtoumax(s, e, b); }
H long __isoc23_wcstol(const wchar_t *s, wchar_t **e, int b) { return wcstol(s, e, b); }
H unsigned long __isoc23_wcstoul(const wchar_t *s, wchar_t **e, int b) { return wcstoul(s, e, b); }
H long long __isoc23_wcstoll(const wchar_t *s, wchar_t **e, int b) { return wcstoll(s, e, b); }
H unsigned long long __isoc23_wcstoull(const wchar_t *s, wchar_t **e, int b) { return wcstoull(s, e, b); }
H int __isoc23_vsscanf(const char *s, const char *f, va_list a) { return vsscanf(s, f, a); }
H int __isoc23_sscanf(const char *s, const char *f, ...) { va_list a; va_start(a, f); int r = vsscanf(s, f, a); va_end(a); return r; }
H int __isoc23_vfscanf(FILE *s, const char *f, va_list a) { return vfscanf(s, f, a); }
H int __isoc23_fscanf(FILE *s, const char *f, ...) { va_list a; va_start(a, f); int r = vfscanf(s, f, a); va_end(a); return r; }
H int __isoc23_vswscanf(const wchar_t *s, const wchar_t *f, va_list a) { return vswscanf(s, f, a); }
H int __isoc23_swscanf(const wchar_t *s, const wchar_t *f, ...) { va_list a; va_start(a, f); int r = vswscanf(s, f, a); va_end(a); return r; }
