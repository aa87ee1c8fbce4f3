// Command printbuild prints buildinfo.Read(), for the test that checks the
// -ldflags -X names the package documents.
package main

import (
	"fmt"

	"github.com/ringxds/ringxds/internal/buildinfo"
)

func main() { fmt.Print(buildinfo.Read().Text("printbuild")) }
