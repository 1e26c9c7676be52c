# Sourced by engine/build.sh and engine/cargo.sh, with the build lock held:
# mirrors engine/rust and engine/testdata into a directory under the build
# cache whose path does not depend on the clone's, and sets engine_stage to
# it. Cargo fingerprints a local crate by its path and its files' mtimes,
# so building each fresh clone in place recompiled the crate and redid the
# release profile's fat LTO (about 30 s) and the tests' build (about 28 s)
# though nothing had changed. Here a file is copied only when its bytes
# differ, so an unchanged source keeps its mtime and cargo's cache holds.
engine_stage_sync() {
	local here="$1" sub f
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
