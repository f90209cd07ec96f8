// Command cmd writes the module's Lua scripts whole from their sources
// (see package luagen). `go generate` runs it in the module's root:
//
//	go run ./internal/luagen/cmd
//
// It reads lua/src (-src) and writes lua/<name>.lua (-out) for each
// script, and removes the generated files of scripts no longer in the
// sources. It writes nothing when a source is wrong, and says why.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/fencedlock/fencedlock/internal/luagen"
)

func main() {
	src := flag.String("src", luagen.SourceDir, "the folder of the body sources, with the helpers in its lib folder")
	out := flag.String("out", "lua", "the folder the whole scripts are written to")
	flag.Parse()
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "luagen:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	files, err := luagen.Generate(src)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(out, name)
		if old, err := os.ReadFile(path); err == nil && string(old) == string(files[name]) {
			continue
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return err
		}
		fmt.Println("luagen: wrote", path)
	}
	// A generated file whose script is gone from the sources goes too.
	old, err := filepath.Glob(filepath.Join(out, "*.lua"))
	if err != nil {
		return err
	}
	for _, path := range old {
		if _, ok := files[filepath.Base(path)]; ok {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if luagen.IsGenerated(b) {
			if err := os.Remove(path); err != nil {
				return err
			}
			fmt.Println("luagen: removed", path)
		}
	}
	return nil
}
