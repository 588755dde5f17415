package cli

import (
	"strings"
	"testing"
)

// Text from the server (keys, holders) reaches the terminal without a
// character the terminal would act on.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"jobs/nightly":         "jobs/nightly",
		"with space and ünï":   "with space and ünï",
		"":                     "",
		"evil\x1b[2J\r\nkey":   `"evil\x1b[2J\r\nkey"`,
		"tab\there":            `"tab\there"`,
		"bidi\u202egnp.exe":    `"bidi\u202egnp.exe"`,
		"del\x7f":              `"del\x7f"`,
		"c1\u009b31m":          `"c1\u009b31m"`,
		"not utf-8 \xff":       `"not utf-8 \xff"`,
		`already "quoted" key`: `already "quoted" key`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
	for in, want := range map[string]string{
		`key "a\x1b" is outside`:   `key "a\x1b" is outside`,
		"raw \x1b[2J\r\nforged":    `raw \x1b[2J\x0d\x0aforged`,
		"bad \xff byte, ok \uFFFD": `bad \xff byte, ok ` + "\uFFFD",
	} {
		if got := escapeControls(in); got != want {
			t.Errorf("escapeControls(%q) = %s, want %s", in, got, want)
		}
	}
	var b strings.Builder
	if err := table(&b, []string{"KEY", "HOLDER"}, [][]string{{"a\rb", "h\x1b]0;x\x07"}}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); strings.ContainsAny(got, "\r\x1b\x07") || !strings.Contains(got, `"a\rb"`) {
		t.Fatalf("table printed %q", got)
	}
}
