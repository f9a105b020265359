"""The one gate every call passes: plan, dispatch, settle, the decision desk and the answer."""
