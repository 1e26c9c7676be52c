# Sourced by engine/build.sh and engine/cargo.sh. engine_stage_locked HERE
# takes the build lock on the shared cargo target directory (held until
# the calling script exits) and mirrors HERE/rust and HERE/testdata into a
# directory under the build cache whose path does not depend on the
# clone's, setting engine_stage to it.
#
# The lock: two builds sharing the target directory (two clones, or a
# clone and a worktree) would otherwise race, since cargo locks it only
# while it builds, and one build could copy out the library the other just
# made from different sources, or mirror over sources being built.
#
# The mirror: cargo fingerprints a local crate by its path and its files'
# mtimes, so building each fresh clone in place recompiled the crate and
# redid the release profile's fat LTO (about 30 s) and the tests' build
# (about 28 s) though nothing had changed. A file is copied only when its
# bytes differ, so an unchanged source keeps its mtime and the cache holds.
engine_stage_locked() {
	local here="$1" sub f
	export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/openetl/cargo-target}"
	mkdir -p "$CARGO_TARGET_DIR"
	exec 9>"$CARGO_TARGET_DIR/openetl-engine-build.lock"
	flock 9
	engine_stage="${OPENETL_ENGINE_STAGE:-$(dirname "$CARGO_TARGET_DIR")/engine-src}"
	for sub in rust testdata; do
		mkdir -p "$engine_stage/$sub"
		(cd "$here/$sub" && find . -path ./target -prune -o -type f -print) | while IFS= read -r f; do
			if ! cmp -s "$here/$sub/$f" "$engine_stage/$sub/$f"; then
				mkdir -p "$engine_stage/$sub/$(dirname "$f")"
				cp "$here/$sub/$f" "$engine_stage/$sub/$f"
			fi
		done
		(cd "$engine_stage/$sub" && find . -type f -print) | while IFS= read -r f; do
			[ -e "$here/$sub/$f" ] || rm -f "$engine_stage/$sub/$f"
		done
	done
}
