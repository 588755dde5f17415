// Package config fills command-line flags that were not given on the command
// line from HOLDFAST_* environment variables and then from a config file.
//
// Precedence, highest first: the command line, the environment, the config
// file, the flag's default.
//
// Environment: flag --max-ttl is HOLDFAST_MAX_TTL (upper case, "-" becomes
// "_"). A repeatable flag (--backend-opt) takes several values from one
// variable separated by ";" or newlines, e.g.
// HOLDFAST_BACKEND_OPT='endpoints=127.0.0.1:2379;prefix=/locks'.
//
// Config file: YAML (JSON is YAML too, so a JSON file works as is), parsed
// with go.yaml.in/yaml/v3. Top-level keys are flag names ("max-ttl" or
// "max_ttl"); a repeatable flag takes a list, and --backend-opt also takes a
// map:
//
//	addr: 127.0.0.1:7410
//	backend: etcd
//	backend-opt:
//	  endpoints: 127.0.0.1:2379
//	max-ttl: 1h
//
// An unknown key is an error, so a typo never goes unnoticed.
package config

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix prefixes every environment variable.
const EnvPrefix = "HOLDFAST_"

// EnvName is the environment variable of a flag.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// repeatable reports whether a flag takes several values.
func repeatable(f *pflag.Flag) bool {
	return strings.HasSuffix(f.Value.Type(), "Slice") || strings.HasSuffix(f.Value.Type(), "Array")
}

// Apply sets every flag of fs not given on the command line from the
// environment (lookup, usually os.LookupEnv) and then from the config file
// at path (empty: none). skip names flags that are not read this way.
func Apply(fs *pflag.FlagSet, path string, lookup func(string) (string, bool), skip ...string) error {
	fromEnv := map[string]bool{}
	var errs []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || slices.Contains(skip, f.Name) {
			return
		}
		v, ok := lookup(EnvName(f.Name))
		if !ok {
			return
		}
		vals := []string{v}
		if repeatable(f) {
			vals = strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == '\n' })
		}
		for _, s := range vals {
			if err := f.Value.Set(strings.TrimSpace(s)); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", EnvName(f.Name), err))
			}
		}
		fromEnv[f.Name] = true
	})
	if len(errs) > 0 {
		return fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	if path == "" {
		return nil
	}
	values, err := readFile(path)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.ReplaceAll(k, "_", "-")
		f := fs.Lookup(name)
		if f == nil || slices.Contains(skip, name) {
			return fmt.Errorf("config %s: unknown key %q", path, k)
		}
		if f.Changed || fromEnv[name] {
			continue
		}
		vals, err := scalars(values[k], repeatable(f))
		if err != nil {
			return fmt.Errorf("config %s: %s: %w", path, k, err)
		}
		for _, s := range vals {
			if err := f.Value.Set(s); err != nil {
				return fmt.Errorf("config %s: %s: %w", path, k, err)
			}
		}
	}
	return nil
}

func readFile(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return values, nil
}

// scalars turns a config value into the strings to Set: a scalar is one
// value; a list (or a map, as key=value) is several, for repeatable flags.
func scalars(v any, many bool) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case []any:
		if !many {
			return nil, fmt.Errorf("takes one value, not a list")
		}
		out := make([]string, 0, len(v))
		for _, x := range v {
			s, err := scalars(x, false)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case map[string]any:
		if !many {
			return nil, fmt.Errorf("takes one value, not a map")
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([]string, 0, len(v))
		for _, k := range keys {
			s, err := scalars(v[k], false)
			if err != nil || len(s) != 1 {
				return nil, fmt.Errorf("%s: want one value", k)
			}
			out = append(out, k+"="+s[0])
		}
		return out, nil
	default:
		return []string{fmt.Sprint(v)}, nil
	}
}
