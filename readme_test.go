package etl_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The README's embedding snippet is Example (example_test.go) verbatim, so
// the snippet a user copies is one go test compiles and runs.
func TestREADMESnippetIsExample(t *testing.T) {
	readme := readText(t, "README.md")
	src := readText(t, "example_test.go")
	start := strings.Index(src, "\nfunc Example() {\n")
	if start < 0 {
		t.Fatal("example_test.go has no func Example")
	}
	end := strings.Index(src[start:], "\n}\n")
	if end < 0 {
		t.Fatal("func Example in example_test.go has no closing brace at the line's start")
	}
	example := src[start+1 : start+end+3]
	blocks := regexp.MustCompile("(?ms)^```go\n(.*?)^```$").FindAllStringSubmatch(readme, -1)
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d Go code blocks, want 1 (the Example)", len(blocks))
	}
	if blocks[0][1] != example {
		t.Errorf("README.md's Go snippet differs from func Example in example_test.go; copy it again.\nREADME:\n%s\nExample:\n%s", blocks[0][1], example)
	}
}

// markdownLink matches [text](target) and captures the target.
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every link in the user-facing Markdown files resolves inside the
// repository: relative paths that exist (with their #anchor as a heading
// of the file linked to). The README links nowhere else.
func TestREADMELinksResolve(t *testing.T) {
	files := []string{"README.md", "CHANGELOG.md", "BENCHMARKS.md"}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(docs))
	}
	files = append(files, docs...)
	checked := 0
	for _, f := range files {
		text := readText(t, f)
		if f == "README.md" {
			if n := strings.Count(text, "\n"); n >= 250 {
				t.Errorf("README.md has %d lines; keep it under 250 (detail belongs in package docs and docs/)", n)
			}
		}
		for _, m := range markdownLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				if f == "README.md" {
					t.Errorf("README.md links outside the repository: %s", target)
				}
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				if rel, err := filepath.Rel(".", file); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: link %s leaves the repository", f, target)
					continue
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %s: %v", f, target, err)
					continue
				}
			}
			if anchor != "" && !hasAnchor(t, file, anchor) {
				t.Errorf("%s: link %s: %s has no heading for #%s", f, target, file, anchor)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no links found: the link pattern is broken")
	}
}

// hasAnchor reports whether the Markdown file has a heading whose
// GitHub-style slug is anchor.
func hasAnchor(t *testing.T, file, anchor string) bool {
	t.Helper()
	for line := range strings.SplitSeq(readText(t, file), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				// GitHub keeps letters and digits of any script and
				// drops the rest: punctuation, and symbols such as →.
				b.WriteRune(r)
			}
		}
		if b.String() == anchor {
			return true
		}
	}
	return false
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
