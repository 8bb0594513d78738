"""The part of the sandbox that runs inside it: the worker process and what each forked child does
before and while it runs a program. Standard library only; the worker imports it as the top-level
package ``inside`` (its folder is all the sandbox's view holds of corl), the parent as
``corl.sandbox.inside``."""
