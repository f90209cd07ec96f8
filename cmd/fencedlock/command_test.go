//go:build unix

package main

import (
	"strings"
	"testing"
)

// Bad usage exits 2 with one line on stderr that says what is wrong,
// before anything is sent to Redis (the tests' URL names a port where
// nothing listens), and without a password of the URL.
func TestUsageErrors(t *testing.T) {
	e := newBareEnv(t)
	for _, tc := range []struct {
		args []string
		env  string // FENCEDLOCK_REDIS_URL, if not e's
		says string
	}{
		{[]string{"frob"}, "", `unknown command "frob"`},
		{[]string{"run"}, "", "missing RESOURCE"},
		{[]string{"run", "r"}, "", "want -- after RESOURCE"},
		{[]string{"run", "r", "true"}, "", "want -- after RESOURCE"},
		{[]string{"run", "r", "--"}, "", "missing CMD"},
		{[]string{"run", "-ttl", "bogus", "r", "--", "true"}, "", `invalid value "bogus" for flag -ttl`},
		{[]string{"run", "-ttl", "0", "r", "--", "true"}, "", "-ttl 0s: must be above 0"},
		{[]string{"run", "-ttl", "-1s", "r", "--", "true"}, "", "-ttl -1s"},
		{[]string{"run", "-wait", "-1s", "r", "--", "true"}, "", "-wait -1s"},
		{[]string{"run", "-kill-after", "0", "r", "--", "true"}, "", "-kill-after 0s"},
		{[]string{"run", "-redis-timeout", "0", "r", "--", "true"}, "", "-redis-timeout 0s"},
		{[]string{"run", "-nope", "r", "--", "true"}, "", "flag provided but not defined: -nope"},
		{[]string{"run", "", "--", "true"}, "", "empty resource name"},
		{[]string{"run", "-redis", "ftp://h", "r", "--", "true"}, "", `-redis: URL scheme "ftp"`},
		{[]string{"run", "-redis", "localhost:6379", "r", "--", "true"}, "", "-redis: not a URL"},
		{[]string{"run", "-redis", "redis://:s3cret@%zz", "r", "--", "true"}, "", "invalid URL escape"},
		{[]string{"run", "-redis", "redis://h:1?bogus=1", "r", "--", "true"}, "", "unexpected option: bogus"},
		{[]string{"run", "-redis", "redis://h:1,h:2", "r", "--", "true"}, "", "several need -cluster or -sentinel-master"},
		{[]string{"run", "-cluster", "-sentinel-master", "m", "r", "--", "true"}, "", "exclude each other"},
		{[]string{"run", "-cluster", "-redis", "unix:///tmp/redis.sock", "r", "--", "true"}, "", "unix:// URL names one server"},
		{[]string{"run", "-cluster", "-redis", "redis://h:1/3", "r", "--", "true"}, "", "only database 0"},
		{[]string{"run", "-sentinel-master", "m", "-redis", "redis://h:1,h", "r", "--", "true"}, "", `"h": each of several hosts must be HOST:PORT`},
		{[]string{"run", "r", "--", "true"}, "ftp://s3cret@h", envRedisURL + `: URL scheme "ftp"`},
		{[]string{"inspect"}, "", "missing RESOURCE"},
		{[]string{"inspect", "-json"}, "", "missing RESOURCE"},
		{[]string{"inspect", ""}, "", "empty resource name"},
		{[]string{"advance", "r"}, "", "want RESOURCE and TOKEN"},
		{[]string{"advance", "r", "12x"}, "", `"12x" is not a decimal number`},
		{[]string{"advance", "r", "0"}, "", "zero is not a token"},
		{[]string{"advance", "r", "18446744073709551615"}, "", "outside 1..9223372036854775806"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var extra []string
			if tc.env != "" {
				extra = append(extra, envRedisURL+"="+tc.env)
			}
			code, out, stderr := e.runStatus(tc.args, extra...)
			if code != exitUsage {
				t.Errorf("status %d, want %d", code, exitUsage)
			}
			if out != "" {
				t.Errorf("stdout: %q", out)
			}
			oneLine(t, stderr, tc.says)
			if strings.Contains(stderr, "s3cret") {
				t.Errorf("the message shows the password: %q", stderr)
			}
		})
	}
}

// Without a command, fencedlock prints its usage and exits 2; with -h, a
// command prints its flags and exits 0.
func TestUsage(t *testing.T) {
	e := newBareEnv(t)
	code, _, stderr := e.runStatus(nil)
	if code != exitUsage || !strings.Contains(stderr, "fencedlock run [flags] RESOURCE -- CMD [ARGS...]") {
		t.Errorf("no command: status %d, stderr %q", code, stderr)
	}
	for _, c := range []string{"run", "inspect", "advance"} {
		code, out, _ := e.runStatus([]string{c, "-h"})
		if code != 0 || !strings.Contains(out, "Usage: fencedlock "+c) || !strings.Contains(out, "-redis URL") {
			t.Errorf("%s -h: status %d, stdout %q", c, code, out)
		}
	}
}
