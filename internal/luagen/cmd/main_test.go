package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRunWritesAndRemovesGeneratedFilesOnly writes the scripts of a
// source folder, leaves a file it did not generate, and removes a
// generated file whose source is gone.
func TestRunWritesAndRemovesGeneratedFilesOnly(t *testing.T) {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "src"), filepath.Join(dir, "out")
	for _, d := range []string{src, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(src, "a.lua"), "return 1\n")
	write(filepath.Join(src, "b.lua"), "return 2\n")
	write(filepath.Join(out, "mine.lua"), "-- written by hand\nreturn 3\n")
	if err := run(src, out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.lua", "b.lua", "mine.lua"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Errorf("after the first run: %v", err)
		}
	}
	if err := os.Remove(filepath.Join(src, "b.lua")); err != nil {
		t.Fatal(err)
	}
	if err := run(src, out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "b.lua")); !os.IsNotExist(err) {
		t.Errorf("b.lua, whose source is gone: %v; want it removed", err)
	}
	if _, err := os.Stat(filepath.Join(out, "mine.lua")); err != nil {
		t.Errorf("mine.lua, not generated: %v; want it kept", err)
	}
	// A wrong source writes nothing.
	write(filepath.Join(src, "a.lua"), "--@include nothing\n")
	before, _ := os.ReadFile(filepath.Join(out, "a.lua"))
	if err := run(src, out); err == nil {
		t.Error("run with a wrong source succeeded")
	}
	after, _ := os.ReadFile(filepath.Join(out, "a.lua"))
	if string(before) != string(after) {
		t.Error("run with a wrong source changed a.lua")
	}
}
