package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type opts struct {
	addr    string
	backend string
	bopts   []string
	maxTTL  time.Duration
	waiters int
}

func flags(o *opts) *pflag.FlagSet {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:7410", "")
	fs.StringVar(&o.backend, "backend", "memory", "")
	fs.StringArrayVar(&o.bopts, "backend-opt", nil, "")
	fs.DurationVar(&o.maxTTL, "max-ttl", 24*time.Hour, "")
	fs.IntVar(&o.waiters, "max-waiters", 10, "")
	fs.String("config", "", "")
	return fs
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedence(t *testing.T) {
	yaml := write(t, "holdfast.yaml", `
addr: 127.0.0.1:9000
backend: etcd
backend-opt:
  endpoints: 127.0.0.1:2379
  prefix: /locks
max_ttl: 1h
max-waiters: 5
`)
	var o opts
	fs := flags(&o)
	if err := fs.Parse([]string{"--addr", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, yaml, env(map[string]string{"HOLDFAST_BACKEND": "redis", "HOLDFAST_ADDR": "127.0.0.1:2"}), "config"); err != nil {
		t.Fatal(err)
	}
	want := opts{addr: "127.0.0.1:1", backend: "redis", bopts: []string{"endpoints=127.0.0.1:2379", "prefix=/locks"}, maxTTL: time.Hour, waiters: 5}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("got %+v, want %+v", o, want)
	}
}

func TestJSONFileAndEnvLists(t *testing.T) {
	js := write(t, "holdfast.json", `{"backend": "postgres", "backend-opt": ["dsn=postgres://x"], "max-ttl": "2h"}`)
	var o opts
	fs := flags(&o)
	_ = fs.Parse(nil)
	if err := Apply(fs, js, env(map[string]string{"HOLDFAST_BACKEND_OPT": "a=1;b=2,3", "HOLDFAST_MAX_TTL": "3h"})); err != nil {
		t.Fatal(err)
	}
	want := opts{addr: "127.0.0.1:7410", backend: "postgres", bopts: []string{"a=1", "b=2,3"}, maxTTL: 3 * time.Hour, waiters: 10}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("got %+v, want %+v", o, want)
	}
}

func TestErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		file string
		env  map[string]string
		want string
	}{
		"unknown key":       {file: "adress: x\n", want: `unknown key "adress"`}, //nolint:misspell // a misspelled key is what the case is about
		"bad duration":      {file: "max-ttl: soon\n", want: "max-ttl"},
		"list for a scalar": {file: "addr: [a, b]\n", want: "addr: takes one value"},
		"bad env":           {env: map[string]string{"HOLDFAST_MAX_WAITERS": "many"}, want: "HOLDFAST_MAX_WAITERS"},
		"config key":        {file: "config: other.yaml\n", want: `unknown key "config"`},
	} {
		t.Run(name, func(t *testing.T) {
			var o opts
			fs := flags(&o)
			_ = fs.Parse(nil)
			path := ""
			if tc.file != "" {
				path = write(t, "c.yaml", tc.file)
			}
			err := Apply(fs, path, env(tc.env), "config")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
