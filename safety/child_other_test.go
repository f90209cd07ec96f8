//go:build !linux

package safety

import (
	"errors"
	"os/exec"
)

// childrenSupported: without a parent-death signal a child could outlive
// a killed test binary, so the scenarios with child processes skip here.
const childrenSupported = false

var errNoChildren = errors.New("child processes run on Linux only")

func prepareChild(*exec.Cmd) {}

func (c *child) stop() error { return errNoChildren }

func (c *child) cont() error { return errNoChildren }
