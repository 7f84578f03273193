// Package all registers every job kind of mlstream with the engine. The
// binary imports it once; so do tests that run the kinds end to end.
// A new kind is a new package under kinds/ plus one import line here.
package all

import (
	_ "github.com/mlstream/mlstream/kinds/distinct"     // distinct
	_ "github.com/mlstream/mlstream/kinds/heavyhitters" // heavy_hitters
	_ "github.com/mlstream/mlstream/kinds/join"         // join
	_ "github.com/mlstream/mlstream/kinds/logreg"       // logreg
)
