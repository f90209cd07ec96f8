package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
)

const (
	// envRedisURL names the environment variable read when -redis is not
	// given.
	envRedisURL = "FENCEDLOCK_REDIS_URL"
	// defaultRedisURL is the Redis used when neither -redis nor
	// FENCEDLOCK_REDIS_URL says another.
	defaultRedisURL = "redis://localhost:6379"
)

// redisFlags are the flags, common to every command, that say which
// Redis to use and under which prefix.
type redisFlags struct {
	url     string        // -redis
	master  string        // -sentinel-master
	cluster bool          // -cluster
	prefix  string        // -prefix
	idle    time.Duration // -idle-expiry
	timeout time.Duration // -redis-timeout
}

// locker returns the Locker of the command on client: under -prefix, its
// counters kept for -idle-expiry, as the services that share them keep
// them (a Locker that writes a counter sets its expiry).
func (r *redisFlags) locker(client redis.UniversalClient) *fencedlock.Locker {
	return fencedlock.New(client, fencedlock.WithPrefix(r.prefix), fencedlock.WithIdleExpiry(r.idle))
}

// client returns a client of the Redis the flags name. Nothing is sent
// to Redis yet. Its error is one line naming the flag, or the
// environment variable, that is wrong, without the URL's password.
func (r *redisFlags) client() (redis.UniversalClient, error) {
	raw, source := r.url, "-redis"
	if raw == "" {
		raw, source = os.Getenv(envRedisURL), envRedisURL
	}
	if raw == "" {
		raw, source = defaultRedisURL, "the default URL"
	}
	cfg, err := parseConfig(raw, r.master, r.cluster)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return cfg.client(), nil
}

// redisConfig holds the options of one of go-redis's clients: exactly one
// field is set.
type redisConfig struct {
	single   *redis.Options         // one server
	cluster  *redis.ClusterOptions  // -cluster
	failover *redis.FailoverOptions // -sentinel-master
}

// client returns a client with the options.
func (c redisConfig) client() redis.UniversalClient {
	switch {
	case c.cluster != nil:
		return redis.NewClusterClient(c.cluster)
	case c.failover != nil:
		return redis.NewFailoverClient(c.failover)
	}
	return redis.NewClient(c.single)
}

// parseConfig returns the options for the Redis that rawURL names: one
// server, or with master set the Sentinels that know it, or with cluster
// a Redis Cluster. The URL's host may list several addresses, separated
// by commas, for the Sentinels and the cluster nodes.
func parseConfig(rawURL, master string, cluster bool) (redisConfig, error) {
	if cluster && master != "" {
		return redisConfig{}, errors.New("-cluster and -sentinel-master exclude each other")
	}
	u, hosts, err := parseURL(rawURL)
	if err != nil {
		return redisConfig{}, err
	}
	if u.Scheme == "unix" && (cluster || master != "") {
		return redisConfig{}, errors.New("a unix:// URL names one server: it takes neither -cluster nor -sentinel-master")
	}
	var cfg redisConfig
	switch {
	case cluster:
		if p := strings.Trim(u.Path, "/"); p != "" {
			return redisConfig{}, fmt.Errorf("a cluster has only database 0: drop the path %q", u.Path)
		}
		cfg.cluster, err = redis.ParseClusterURL(withAddrs(u, hosts[1:]).String())
	case master != "":
		cfg.failover, err = failoverOptions(u, hosts, master)
	case len(hosts) > 1:
		err = fmt.Errorf("the URL lists %d hosts: several need -cluster or -sentinel-master", len(hosts))
	default:
		cfg.single, err = redis.ParseURL(u.String())
	}
	if err != nil {
		return redisConfig{}, err
	}
	return cfg, nil
}

// failoverOptions returns the options of a Sentinel failover client for
// master. The URL's hosts are the Sentinels; its user and password are
// those of the master and its replicas, as in a URL of one server, and
// the query parameters sentinel_username and sentinel_password those of
// the Sentinels. Every other query parameter is go-redis's.
func failoverOptions(u *url.URL, hosts []string, master string) (*redis.FailoverOptions, error) {
	q := u.Query()
	sentinelUser, sentinelPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	rest := *u
	rest.RawQuery = q.Encode()
	o, err := redis.ParseFailoverURL(withAddrs(&rest, hosts[1:]).String())
	if err != nil {
		return nil, err
	}
	o.MasterName = master
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPass
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	return o, nil
}

// parseURL parses a Redis URL whose host may list several addresses,
// host:port,host:port, which net/url does not take. It returns the URL
// with the first address as its host, and all the addresses.
func parseURL(raw string) (*url.URL, []string, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	switch {
	case !ok:
		return nil, nil, errors.New("not a URL: want redis://HOST:PORT, rediss://HOST:PORT or unix:///PATH")
	case scheme != "redis" && scheme != "rediss" && scheme != "unix":
		return nil, nil, fmt.Errorf("URL scheme %q: want redis, rediss or unix", scheme)
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hostList := "", authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, hostList = authority[:at+1], authority[at+1:]
	}
	hosts := strings.Split(hostList, ",")
	if len(hosts) > 1 {
		for _, h := range hosts {
			if host, port, err := net.SplitHostPort(h); err != nil || host == "" || port == "" {
				return nil, nil, fmt.Errorf("the URL's host list has %q: each of several hosts must be HOST:PORT", h)
			}
		}
	}
	if scheme != "unix" {
		for _, h := range hosts {
			if _, port, err := net.SplitHostPort(h); err == nil {
				if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
					return nil, nil, fmt.Errorf("the URL's host %q: port %q is not a number from 1 to 65535", h, port)
				}
			}
		}
	}
	u, err := url.Parse(scheme + "://" + userinfo + hosts[0] + tail)
	if err != nil {
		// url.Error repeats the whole URL, password included.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, nil, fmt.Errorf("invalid URL: %w", err)
	}
	return u, hosts, nil
}

// withAddrs returns u with the addresses added as addr query parameters,
// the form go-redis's ParseClusterURL and ParseFailoverURL take.
func withAddrs(u *url.URL, addrs []string) *url.URL {
	if len(addrs) == 0 {
		return u
	}
	c := *u
	q := c.Query()
	for _, a := range addrs {
		q.Add("addr", a)
	}
	c.RawQuery = q.Encode()
	return &c
}
