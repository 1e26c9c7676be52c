package faker

import "github.com/openetl/etl/source"

// The source contract this connector implements, checked by the
// compiler. It implements none of the optional capabilities (see
// package source): it holds no resources, acknowledges nothing upstream,
// and its splits are never behind anything but their own pace.
var (
	_ source.Source = (*Source)(nil)
	_ source.Split  = (*split)(nil)
)
