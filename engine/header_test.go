package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cFunc is one C function of the engine's ABI, from the Rust exports or
// the header: its signature in C, parameter names included.
type cFunc struct {
	name   string
	sig    string // "int32_t openetl_x(const uint8_t* p, size_t n)"
	gated  bool   // Rust: behind a cargo feature; header: declared weak
	guards bool   // Rust: the body runs under ffi::guard or catch_unwind
}

var (
	rustExport = regexp.MustCompile(`(?s)((?:#\[cfg\([^\]]*\)\]\s*)*)#\[unsafe\(no_mangle\)\]\s*pub (?:unsafe )?extern "C" fn (\w+)\(([^)]*)\)\s*(?:->\s*([\w:]+)\s*)?\{`)
	cComment   = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	cProto     = regexp.MustCompile(`(?s)([A-Za-z_][\w ]*?\**)\s*\b(openetl_\w+)\s*\(([^)]*)\)\s*(__attribute__\(\(weak\)\))?\s*;`)
	space      = regexp.MustCompile(`\s+`)
)

// rustToC spells a Rust parameter or return type of the C surface in C.
func rustToC(t string) (string, error) {
	t = strings.TrimSpace(t)
	switch {
	case strings.HasPrefix(t, "*const "):
		in, err := rustToC(strings.TrimPrefix(t, "*const "))
		if err != nil {
			return "", err
		}
		if !strings.HasSuffix(in, "*") {
			in = "const " + in
		}
		return in + "*", nil
	case strings.HasPrefix(t, "*mut "):
		in, err := rustToC(strings.TrimPrefix(t, "*mut "))
		return in + "*", err
	}
	if c, ok := map[string]string{
		"u8": "uint8_t", "i32": "int32_t", "u32": "uint32_t", "i64": "int64_t",
		"usize": "size_t", "c_char": "char", "c_void": "void",
		"FFI_ArrowArray": "struct ArrowArray", "FFI_ArrowSchema": "struct ArrowSchema",
	}[t]; ok {
		return c, nil
	}
	return "", fmt.Errorf("no C spelling for Rust type %q: add it to rustToC", t)
}

// rustExports reads every #[no_mangle] extern "C" fn of the crate.
func rustExports(t *testing.T) map[string]cFunc {
	t.Helper()
	files, err := filepath.Glob("rust/src/*.rs")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("rust/src/*/*.rs")
	out := map[string]cFunc{}
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if n := strings.Count(src, "#[unsafe(no_mangle)]"); n != len(rustExport.FindAllString(src, -1)) {
			t.Fatalf("%s: %d #[unsafe(no_mangle)] but %d functions this test can read: keep each export `pub unsafe extern \"C\" fn name(args) -> ret {`", f, n, len(rustExport.FindAllString(src, -1)))
		}
		for _, m := range rustExport.FindAllStringSubmatchIndex(src, -1) {
			cfg, name, params, ret := src[m[2]:m[3]], src[m[4]:m[5]], src[m[6]:m[7]], ""
			if m[8] >= 0 {
				ret = src[m[8]:m[9]]
			}
			cret := "void"
			if ret != "" {
				if cret, err = rustToC(ret); err != nil {
					t.Fatalf("%s: %s: %v", f, name, err)
				}
			}
			var ps []string
			for _, p := range strings.Split(params, ",") {
				if p = strings.TrimSpace(p); p == "" {
					continue
				}
				pname, ptype, ok := strings.Cut(p, ":")
				if !ok {
					t.Fatalf("%s: %s: parameter %q has no type", f, name, p)
				}
				ct, err := rustToC(ptype)
				if err != nil {
					t.Fatalf("%s: %s: %v", f, name, err)
				}
				ps = append(ps, ct+" "+strings.TrimSpace(pname))
			}
			if len(ps) == 0 {
				ps = []string{"void"}
			}
			// The body up to the next export (or the end of the file).
			body := src[m[1]:]
			if i := strings.Index(body, "#[unsafe(no_mangle)]"); i >= 0 {
				body = body[:i]
			}
			out[name] = cFunc{
				name:   name,
				sig:    fmt.Sprintf("%s %s(%s)", cret, name, strings.Join(ps, ", ")),
				gated:  strings.Contains(cfg, "feature"),
				guards: strings.Contains(body, "ffi::guard(") || strings.Contains(body, "catch_unwind("),
			}
		}
	}
	return out
}

// headerDecls reads the function declarations of the C header.
func headerDecls(t *testing.T) (map[string]cFunc, string) {
	t.Helper()
	b, err := os.ReadFile("include/openetl_engine.h")
	if err != nil {
		t.Fatal(err)
	}
	src := cComment.ReplaceAllString(string(b), " ")
	out := map[string]cFunc{}
	for _, m := range cProto.FindAllStringSubmatch(src, -1) {
		ret := space.ReplaceAllString(strings.TrimSpace(m[1]), " ")
		var ps []string
		for _, p := range strings.Split(m[3], ",") {
			p = space.ReplaceAllString(strings.TrimSpace(p), " ")
			p = strings.ReplaceAll(p, " *", "*")
			// "const uint8_t* cfg": the name is after the last space or star.
			if i := strings.LastIndexAny(p, " *"); i >= 0 && p != "void" {
				p = p[:i+1] + " " + p[i+1:]
				p = strings.ReplaceAll(p, "  ", " ")
			}
			ps = append(ps, p)
		}
		if _, dup := out[m[2]]; dup {
			t.Errorf("header declares %s twice", m[2])
		}
		out[m[2]] = cFunc{name: m[2], sig: fmt.Sprintf("%s %s(%s)", ret, m[2], strings.Join(ps, ", ")), gated: m[4] != ""}
	}
	return out, src
}

// The header is the Go side's view of the library: every Rust export is
// declared with its exact signature, every declaration is exported, and a
// function behind a cargo feature (absent from the committed library) is
// weak, so that code calling it still links.
func TestHeaderMatchesRustExports(t *testing.T) {
	rust := rustExports(t)
	hdr, _ := headerDecls(t)
	if len(rust) < 10 {
		t.Fatalf("found only %d Rust exports: is the parser broken?", len(rust))
	}
	for _, name := range sortedKeys(rust) {
		r := rust[name]
		h, ok := hdr[name]
		switch {
		case !ok:
			t.Errorf("Rust exports %s, the header does not declare it:\n\t%s;", name, r.sig)
		case h.sig != r.sig:
			t.Errorf("%s differs:\n\tRust:   %s\n\theader: %s", name, r.sig, h.sig)
		case h.gated != r.gated:
			t.Errorf("%s: behind a cargo feature in Rust: %v, weak in the header: %v (a feature's function must be weak)", name, r.gated, h.gated)
		}
	}
	for _, name := range sortedKeys(hdr) {
		if _, ok := rust[name]; !ok {
			t.Errorf("the header declares %s, which the Rust crate does not export", name)
		}
	}
}

// No panic crosses into Go: every export that can run more than a
// pointer check runs its body under the guard (or catch_unwind).
func TestEveryExportCatchesPanics(t *testing.T) {
	trivial := []string{"openetl_engine_abi_v" + strconv.Itoa(abiVersion), "openetl_bytes_free", "openetl_string_free"}
	rust := rustExports(t)
	for _, name := range sortedKeys(rust) {
		if f := rust[name]; !f.guards && !slices.Contains(trivial, name) {
			t.Errorf("%s runs outside ffi::guard and catch_unwind: a panic there would unwind into Go", name)
		}
	}
}

// The ABI version agrees everywhere it is written, and the signatures of
// a version never change: those recorded in testdata/abi_v<N>.txt must
// all still be there. Changing or removing a function means raising the
// version (a new symbol openetl_engine_abi_v<N+1>, ABI_VERSION in lib.rs,
// OPENETL_ENGINE_ABI_VERSION in the header, abiVersion here) and
// recording a new file; adding one keeps it (the new symbol makes a stale
// library a link error) and adds its line to the current file.
func TestABIVersion(t *testing.T) {
	rust := rustExports(t)
	_, hsrc := headerDecls(t)
	lib, err := os.ReadFile("rust/src/lib.rs")
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{"Go abiVersion (engine.go)": strconv.Itoa(abiVersion)}
	if m := regexp.MustCompile(`pub const ABI_VERSION: u32 = (\d+);`).FindStringSubmatch(string(lib)); m != nil {
		versions["Rust ABI_VERSION (lib.rs)"] = m[1]
	}
	if m := regexp.MustCompile(`#define OPENETL_ENGINE_ABI_VERSION (\d+)`).FindStringSubmatch(hsrc); m != nil {
		versions["header OPENETL_ENGINE_ABI_VERSION"] = m[1]
	}
	for name := range rust {
		if v, ok := strings.CutPrefix(name, "openetl_engine_abi_v"); ok {
			versions["Rust symbol "+name] = v
		}
	}
	if len(versions) != 4 {
		t.Fatalf("ABI version not found everywhere: %v", versions)
	}
	for k, v := range versions {
		if v != strconv.Itoa(abiVersion) {
			t.Errorf("ABI versions disagree: %s is %s, Go abiVersion is %d (all: %v)", k, v, abiVersion, versions)
		}
	}

	var current []string
	for _, name := range sortedKeys(rust) {
		if !rust[name].gated {
			current = append(current, rust[name].sig)
		}
	}
	file := fmt.Sprintf("testdata/abi_v%d.txt", abiVersion)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v: record ABI %d's signatures there, one per line:\n%s", err, abiVersion, strings.Join(current, "\n"))
	}
	recorded := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, sig := range recorded {
		if !slices.Contains(current, sig) {
			t.Errorf("ABI %d's %s changed or was removed: raise the ABI version to %d (see this test's comment)", abiVersion, sig, abiVersion+1)
		}
	}
	for _, sig := range current {
		if !slices.Contains(recorded, sig) {
			t.Errorf("new function %s: add its line to %s", sig, file)
		}
	}
}

func sortedKeys(m map[string]cFunc) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
