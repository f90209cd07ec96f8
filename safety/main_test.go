package safety

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The run modes. Without flags the suite runs in quick mode, a few
// seconds of workload per scenario, for CI. -safety.duration sets the
// workload per scenario and selects the long mode, where a fault that had
// no effect fails its scenario instead of being logged.
var (
	flagDuration = flag.Duration("safety.duration", 0,
		"workload per scenario; 0 runs the quick mode ("+quickDuration.String()+" per scenario), any other value the long mode")
	flagSeed = flag.Int64("safety.seed", 0,
		"base seed of the clients' and the nemesis's random choices (not of the timing); 0 picks one from the clock (always logged)")
	flagReport = flag.String("safety.report", "",
		"write the Markdown report to this file, and porcupine's visualizations and the histories of failing scenarios next to it")
	flagCheckTimeout = flag.Duration("safety.check-timeout", 0,
		"porcupine's time limit per scenario; 0: "+quickCheckTimeout.String()+" in quick mode, "+longCheckTimeout.String()+" in long mode")
)

const (
	quickDuration     = 4 * time.Second
	quickCheckTimeout = 30 * time.Second
	longCheckTimeout  = 10 * time.Minute
)

// runConfig is the suite's configuration, from the flags.
type runConfig struct {
	long         bool
	duration     time.Duration // workload per scenario
	seed         int64
	report       string // the report's path, or ""
	checkTimeout time.Duration
}

func loadConfig(t *testing.T) runConfig {
	cfg := runConfig{duration: quickDuration, seed: *flagSeed, report: *flagReport, checkTimeout: quickCheckTimeout}
	if *flagDuration > 0 {
		cfg.long, cfg.duration, cfg.checkTimeout = true, *flagDuration, longCheckTimeout
	}
	if *flagCheckTimeout > 0 {
		cfg.checkTimeout = *flagCheckTimeout
	}
	if cfg.report != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.report), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.seed == 0 {
		cfg.seed = time.Now().UnixNano()
	}
	mode := "quick"
	if cfg.long {
		mode = "long"
	}
	t.Logf("%s mode: %v of workload per scenario; seed %d (replay with -safety.seed %d)", mode, cfg.duration, cfg.seed, cfg.seed)
	return cfg
}
