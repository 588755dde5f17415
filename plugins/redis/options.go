package redis

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// Options are the backend's settings, parsed from the plugin's string options
// (holdfast serve --backend-opt key=value). Every key is documented in
// OptionKeys; an unknown key is refused so a typo does not go unnoticed.
type Options struct {
	// Addrs: one address for a single server, several for Cluster, or the
	// Sentinels' addresses together with MasterName.
	Addrs      []string
	MasterName string
	Username   string
	Password   string
	// SentinelUsername/SentinelPassword authenticate to the Sentinels
	// themselves, when they require it.
	SentinelUsername string
	SentinelPassword string
	DB               int
	// Cluster forces the Cluster client even for a single address.
	Cluster bool

	TLS                   bool
	TLSCAFile             string
	TLSCertFile           string
	TLSKeyFile            string
	TLSServerName         string
	TLSInsecureSkipVerify bool

	// KeyPrefix starts every Redis key and channel the backend uses.
	KeyPrefix string
	// MetaRetention is how long a key's metadata (last fencing token, last
	// stamp) outlives its lock; 0 keeps it forever. See the package doc.
	MetaRetention time.Duration
	MinTTL        time.Duration
	MaxTTL        time.Duration

	DialTimeout time.Duration
	// OpTimeout bounds each read and write on a connection.
	OpTimeout time.Duration
	PoolSize  int

	// Durable: "auto" (true when Redis fsyncs its append-only file on
	// every write), "true" or "false".
	Durable string
	// KeyspaceEvents: "auto" turns on Redis expiry notifications (CONFIG SET
	// notify-keyspace-events Ex) when they are off and CONFIG is allowed;
	// "off" leaves Redis alone (the engine's expiry timer then wakes waiters).
	KeyspaceEvents string
}

// OptionKeys lists the accepted option keys with their meaning.
var OptionKeys = map[string]string{
	"addrs":                    "comma-separated host:port list (one server, Cluster nodes, or Sentinels with master_name); default 127.0.0.1:6379",
	"master_name":              "Sentinel master name; set it to use Sentinel",
	"username":                 "ACL user name",
	"password":                 "password (ACL user's, or requirepass)",
	"sentinel_username":        "user name for the Sentinels",
	"sentinel_password":        "password for the Sentinels",
	"db":                       "database number (single server and Sentinel only); default 0",
	"cluster":                  "true to use the Cluster client even for one address",
	"tls":                      "true to connect with TLS",
	"tls_ca":                   "PEM file of the CA that signed the server's certificate",
	"tls_cert":                 "PEM client certificate (with tls_key)",
	"tls_key":                  "PEM client key (with tls_cert)",
	"tls_server_name":          "server name to verify instead of the address's host",
	"tls_insecure_skip_verify": "true to skip certificate verification (testing only); default false",
	"key_prefix":               "prefix of every Redis key and channel; default holdfast:",
	"meta_retention":           "how long a key's last fencing token and stamp outlive its lock (Go duration; 0 = forever); default 1h",
	"min_ttl":                  "smallest lease TTL accepted; default 10ms",
	"max_ttl":                  "largest lease TTL accepted; default 24h",
	"dial_timeout":             "connect timeout; default 3s",
	"op_timeout":               "read/write timeout of each call; default 3s",
	"pool_size":                "connections per node; default go-redis's (10 per CPU)",
	"durable":                  "auto|true|false; auto = appendonly yes with appendfsync always",
	"keyspace_events":          "auto|off; auto enables expiry notifications (notify-keyspace-events Ex) when allowed",
}

// DefaultOptions are the settings before any option is applied.
func DefaultOptions() Options {
	return Options{
		Addrs:          []string{"127.0.0.1:6379"},
		KeyPrefix:      "holdfast:",
		MetaRetention:  time.Hour,
		MinTTL:         10 * time.Millisecond,
		MaxTTL:         24 * time.Hour,
		DialTimeout:    3 * time.Second,
		OpTimeout:      3 * time.Second,
		Durable:        "auto",
		KeyspaceEvents: "auto",
	}
}

// ParseOptions applies opts to DefaultOptions. Errors wrap
// backend.ErrInvalidArgument and name the option.
func ParseOptions(opts map[string]string) (Options, error) {
	o := DefaultOptions()
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := strings.TrimSpace(opts[k])
		if err := o.set(k, v); err != nil {
			return Options{}, fmt.Errorf("%w: redis option %s=%q: %w", backend.ErrInvalidArgument, k, opts[k], err)
		}
	}
	if len(o.Addrs) == 0 {
		return Options{}, fmt.Errorf("%w: redis option addrs: at least one address is required", backend.ErrInvalidArgument)
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		return Options{}, fmt.Errorf("%w: redis option key_prefix=%q: must not contain { or } (the backend uses them as Cluster hash tags)", backend.ErrInvalidArgument, o.KeyPrefix)
	}
	if o.MinTTL <= 0 || o.MaxTTL < o.MinTTL {
		return Options{}, fmt.Errorf("%w: redis options min_ttl=%s max_ttl=%s: need 0 < min_ttl <= max_ttl", backend.ErrInvalidArgument, o.MinTTL, o.MaxTTL)
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return Options{}, fmt.Errorf("%w: redis options tls_cert and tls_key: set both or neither", backend.ErrInvalidArgument)
	}
	return o, nil
}

func (o *Options) set(k, v string) error {
	var err error
	switch k {
	case "addrs":
		o.Addrs = nil
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				o.Addrs = append(o.Addrs, a)
			}
		}
	case "master_name":
		o.MasterName = v
	case "username":
		o.Username = v
	case "password":
		o.Password = v
	case "sentinel_username":
		o.SentinelUsername = v
	case "sentinel_password":
		o.SentinelPassword = v
	case "db":
		o.DB, err = strconv.Atoi(v)
		if err == nil && o.DB < 0 {
			err = fmt.Errorf("must be >= 0")
		}
	case "cluster":
		o.Cluster, err = strconv.ParseBool(v)
	case "tls":
		o.TLS, err = strconv.ParseBool(v)
	case "tls_ca":
		o.TLSCAFile, o.TLS = v, true
	case "tls_cert":
		o.TLSCertFile, o.TLS = v, true
	case "tls_key":
		o.TLSKeyFile, o.TLS = v, true
	case "tls_server_name":
		o.TLSServerName = v
	case "tls_insecure_skip_verify":
		o.TLSInsecureSkipVerify, err = strconv.ParseBool(v)
	case "key_prefix":
		o.KeyPrefix = v
	case "meta_retention":
		o.MetaRetention, err = parseDuration(v, true)
	case "min_ttl":
		o.MinTTL, err = parseDuration(v, false)
	case "max_ttl":
		o.MaxTTL, err = parseDuration(v, false)
	case "dial_timeout":
		o.DialTimeout, err = parseDuration(v, false)
	case "op_timeout":
		o.OpTimeout, err = parseDuration(v, false)
	case "pool_size":
		o.PoolSize, err = strconv.Atoi(v)
		if err == nil && o.PoolSize < 1 {
			err = fmt.Errorf("must be >= 1")
		}
	case "durable":
		if v != "auto" && v != "true" && v != "false" {
			err = fmt.Errorf("must be auto, true or false")
		}
		o.Durable = v
	case "keyspace_events":
		if v != "auto" && v != "off" {
			err = fmt.Errorf("must be auto or off")
		}
		o.KeyspaceEvents = v
	default:
		keys := make([]string, 0, len(OptionKeys))
		for k := range OptionKeys {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		err = fmt.Errorf("unknown option; known: %s", strings.Join(keys, ", "))
	}
	return err
}

func parseDuration(v string, zeroOK bool) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < 0 || (d == 0 && !zeroOK) {
		return 0, fmt.Errorf("must be positive")
	}
	return d, nil
}

// tlsConfig builds the client TLS configuration, or nil without TLS.
func (o Options) tlsConfig() (*tls.Config, error) {
	if !o.TLS {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         o.TLSServerName,
		InsecureSkipVerify: o.TLSInsecureSkipVerify, //nolint:gosec // opt-in, off by default
	}
	if o.TLSCAFile != "" {
		pem, err := os.ReadFile(o.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca %s: no PEM certificate found", o.TLSCAFile)
		}
		cfg.RootCAs = pool
	}
	if o.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls_cert/tls_key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
